// Lockstep A/B of one plan option on mnist-cnn training: two plans, the option off (A) and on (B),
// from the same weights take the same batches, alternating step by step in one process, so a
// noisy host's slow minutes fall on both alike. Prints each side's seconds per block of steps.
// Usage: bench_lockstep DATA_DIR [threads=2] [steps=938] [option=split_background] [WEIGHTS]
// (WEIGHTS: a safetensors file both plans start from, e.g. after a few epochs; else init seed 1)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember/ember.h"

int main(int argc, char** argv) {
  using namespace ember;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_lockstep DATA_DIR [threads] [steps] [option: split_background | fuse] [WEIGHTS]\n");
    return 2;
  }
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2, steps = argc > 3 ? std::atoi(argv[3]) : 938;
  const std::string option = argc > 4 ? argv[4] : "split_background";
  if (threads < 1 || threads > 256 || steps < 1) {
    std::fprintf(stderr, "bench_lockstep: threads must be 1..256 and steps at least 1 (found %s, %s)\n",
                 argc > 2 ? argv[2] : "2", argc > 3 ? argv[3] : "938");
    return 2;
  }
  if (option != "split_background" && option != "fuse") {
    std::fprintf(stderr, "bench_lockstep: unknown option '%s' (split_background or fuse)\n", option.c_str());
    return 2;
  }
  try {
    const Dataset d = load_mnist_dir(argv[1]).train;
    const Model model = builtin_model("mnist-cnn");
    PlanOptions oa, ob;
    oa.batch = ob.batch = 64;
    oa.threads = ob.threads = threads;
    oa.optimizer.kind = ob.optimizer.kind = OptimizerKind::Adam;
    oa.optimizer.l2 = ob.optimizer.l2 = model.recipe.l2;
    (option == "fuse" ? oa.fuse : oa.split_background) = false;
    Plan a(model, oa), b(model, ob);
    a.init_params(1);
    b.init_params(1);
    if (argc > 5) load_weights(a, argv[5]), load_weights(b, argv[5]);
    std::vector<int64_t> idx(64);
    double ta = 0, tb = 0, block_a = 0, block_b = 0;
    std::printf("lockstep A/B of %s on mnist-cnn, %d threads, %d steps of 64 (A: off, B: on)\n", option.c_str(), threads, steps);
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < 64; ++i) idx[size_t(i)] = (int64_t(s) * 64 + i) * 7919 % d.count;
      for (int side = 0; side < 2; ++side) {
        Plan& p = (side ^ (s & 1)) ? b : a;  // alternate which side goes first
        const auto t0 = std::chrono::steady_clock::now();
        p.gather_u8(d.images.data(), d.labels.data(), idx.data(), 64);
        p.forward(64);
        p.loss(64, true);
        p.backward_step(64, model.recipe.lr);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        (&p == &a ? block_a : block_b) += dt;
      }
      if ((s + 1) % 100 == 0 || s + 1 == steps) {
        std::printf("steps %4d-%4d  A %.3f ms/step  B %.3f ms/step  B/A %.3f\n", s / 100 * 100 + 1, s + 1,
                    block_a * 1e3 / ((s % 100) + 1), block_b * 1e3 / ((s % 100) + 1), block_b / block_a);
        ta += block_a, tb += block_b, block_a = block_b = 0;
      }
    }
    std::printf("total  A %.3f s  B %.3f s  B/A %.3f  (per 60000 samples: A %.3f s, B %.3f s)\n", ta, tb, tb / ta,
                ta * 60000 / (64.0 * steps), tb * 60000 / (64.0 * steps));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lockstep: %s\n", e.what());
    return 1;
  }
  return 0;
}
