// A first ember program: build a model with the C++ builder, compile it into a plan, and train
// it on the four MNIST-format files in a directory (default: Fashion-MNIST from Debian).
//   build/release/examples/train_mlp [DATA_DIR] [EPOCHS]
#include <cstdio>
#include <cstdlib>

#include "ember/ember.h"

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : ember::kDefaultDataDir;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 2;

  // 784 -> 256 -> ReLU -> 10, trained with softmax cross-entropy (the default loss).
  ember::Model model;
  model.name = "example-mlp";
  model.flatten().linear(256).relu().linear(10);

  // The plan fixes batch size, threads, kernels and optimizer state; steps allocate nothing.
  ember::PlanOptions options;
  options.batch = 64;
  options.threads = 2;
  options.optimizer.kind = ember::OptimizerKind::Adam;
  ember::Plan plan(model, options);
  plan.init_params(/*seed=*/1);
  std::printf("%s", plan.summary().c_str());

  const ember::TrainTest data = ember::load_mnist_dir(dir);
  ember::TrainConfig cfg;
  cfg.epochs = epochs;
  cfg.schedule.kind = ember::ScheduleKind::Constant;
  cfg.schedule.lr = 1e-3;
  ember::train(plan, data.train, data.test, cfg, [](const ember::EpochMetrics& m) {
    std::printf("epoch %d: train loss %.4f, test accuracy %.2f%%, %.1f s\n", m.epoch, m.train_loss,
                100 * m.test_acc, m.seconds);
    return true;  // false would stop training
  });
  return 0;
} catch (const ember::Error& e) {
  std::fprintf(stderr, "train_mlp: error: %s\n", e.what());
  return 2;
}
