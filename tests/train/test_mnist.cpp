// Real-data test: one epoch of the original recipe on MNIST (../shared/data/mnist) must reach
// >= 97.5 % test accuracy. Skips with a message when the data folder is absent.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "ember/ember.h"

namespace ember {
namespace {

TEST(Mnist, OneEpochOfTheOriginalRecipeReaches97_5Percent) {
  const std::string dir = EMBER_SOURCE_DIR "/../shared/data/mnist";
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) GTEST_SKIP() << "MNIST not found at " << dir << "; skipping";
  const TrainTest data = load_mnist_dir(dir);
  ASSERT_EQ(data.train.count, 60000);
  ASSERT_EQ(data.test.count, 10000);
  const Model model = builtin_model("mnist-cnn");
  PlanOptions o;
  o.batch = model.recipe.batch_size;
  o.threads = 2;
  o.optimizer.kind = OptimizerKind::Adam;
  o.optimizer.l2 = model.recipe.l2;
  Plan plan(model, o);
  plan.init_params(1);
  TrainConfig cfg;
  cfg.epochs = 1;
  cfg.schedule = {ScheduleKind::Cosine, model.recipe.lr, model.recipe.lr_min, model.recipe.t_max};
  const TrainResult r = train(plan, data.train, data.test, cfg, [](const EpochMetrics& m) {
    std::printf("epoch %d: train loss %.4f acc %.2f%%, test acc %.2f%%, %.1f s\n", m.epoch,
                m.train_loss, 100 * m.train_acc, 100 * m.test_acc, m.seconds);
    return true;
  });
  EXPECT_GE(r.last.test_acc, 0.975);
}

}  // namespace
}  // namespace ember
