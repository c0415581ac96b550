// The built-in ResNets "resnet18" (BasicBlock [2, 2, 2, 2]) and "resnet50" (Bottleneck [3, 4, 6,
// 3], torchvision's v1.5: the stride in the 3x3), their nodes named as torchvision 0.14's
// ResNet modules' state_dict keys (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc).
#include <string>

#include "ember/error.h"
#include "ember/model.h"
#include "nn/model_spec.h"

namespace ember {

namespace {

LayerSpec named(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  return named_spec(k, name, std::move(inputs));
}
// Conv2d(bias=False) with padding kernel / 2, as every conv of torchvision's ResNet.
LayerSpec conv(const std::string& name, int out, int kernel, int stride, std::vector<std::string> inputs = {}) {
  LayerSpec s = named(LayerKind::Conv2d, name, std::move(inputs));
  s.out = out;
  s.kernel_h = s.kernel_w = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = kernel / 2;
  s.bias = false;
  return s;
}

// One residual block at `blk` ("layer2.0") reading `in` with `in_c` channels: conv-bn(-relu)
// pairs of `kernels` (each pair's width `widths[i]`, the stride on `stride_at`), a downsample
// conv1x1-bn when the shape changes, then relu(main + shortcut). Returns the block's output name.
std::string block(Model& m, const std::string& blk, const std::string& in, int in_c, const std::vector<int>& kernels,
                  const std::vector<int>& widths, int stride, size_t stride_at) {
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string k = std::to_string(i + 1);
    m.layers.push_back(conv(blk + ".conv" + k, widths[i], kernels[i], i == stride_at ? stride : 1, i == 0 ? std::vector<std::string>{in} : std::vector<std::string>{}));
    m.layers.push_back(named(LayerKind::BatchNorm2d, blk + ".bn" + k));
    if (i + 1 < kernels.size()) m.layers.push_back(named(LayerKind::ReLU, blk + ".relu" + k));
  }
  const int out_c = widths.back();
  std::string shortcut = in;
  if (stride != 1 || in_c != out_c) {
    m.layers.push_back(conv(blk + ".downsample.0", out_c, 1, stride, {in}));
    m.layers.push_back(named(LayerKind::BatchNorm2d, blk + ".downsample.1"));
    shortcut = blk + ".downsample.1";
  }
  m.layers.push_back(named(LayerKind::Add, blk + ".add", {shortcut, blk + ".bn" + std::to_string(kernels.size())}));
  m.layers.push_back(named(LayerKind::ReLU, blk));
  return blk;
}

// torchvision.models.resnet.ResNet(block, layers): the stem (7x7/2 conv, bn, relu, 3x3/2 max pool
// with padding 1), four stages of 64, 128, 256, 512 planes (stride 2 from the second), global
// average pool, fc.
void resnet(Model& m, bool bottleneck, const int blocks[4]) {
  m.layers.push_back(conv("conv1", 64, 7, 2));
  m.layers.push_back(named(LayerKind::BatchNorm2d, "bn1"));
  m.layers.push_back(named(LayerKind::ReLU, "relu"));
  LayerSpec pool = named(LayerKind::MaxPool2d, "maxpool");
  pool.kernel_h = pool.kernel_w = 3;
  pool.stride_h = pool.stride_w = 2;
  pool.pad_h = pool.pad_w = 1;
  m.layers.push_back(pool);
  std::string last = "maxpool";
  int in_c = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string blk = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      const int stride = b == 0 && stage > 0 ? 2 : 1;
      if (bottleneck)
        last = block(m, blk, last, in_c, {1, 3, 1}, {planes, planes, 4 * planes}, stride, 1);
      else
        last = block(m, blk, last, in_c, {3, 3}, {planes, planes}, stride, 0);
      in_c = bottleneck ? 4 * planes : planes;
    }
  }
  m.layers.push_back(named(LayerKind::GlobalAvgPool, "avgpool"));
  m.layers.push_back(named(LayerKind::Flatten, "flatten"));
  LayerSpec fc = named(LayerKind::Linear, "fc");
  fc.out = m.num_classes;
  fc.init = Init::Torch;  // nn.Linear's default
  m.layers.push_back(fc);
}

}  // namespace

Model resnet_model(const std::string& name) {
  Model m;
  m.name = name;
  m.in_c = 3, m.in_h = m.in_w = 64, m.num_classes = 10;  // the data's channels, size and classes in a run
  // torchvision's conv init is kaiming_normal_(fan_out); ember's Kaiming is He normal on fan_in.
  m.init = Init::Kaiming;
  // The recipe: SGD momentum 0.9, lr 0.1 cosine to 0, weight decay 5e-4 (coupled, as
  // PyTorch's SGD) on weights only, batch 128.
  m.recipe.optimizer = "momentum";
  m.recipe.momentum = 0.9;
  m.recipe.lr = 0.1;
  m.recipe.schedule = "cosine";
  m.recipe.lr_min = 0;
  m.recipe.t_max = m.recipe.epochs;
  m.recipe.l2 = 5e-4;
  m.recipe.weight_decay = 0;
  m.recipe.decay_norms = false;  // not the batch norms' scales (nor any bias)
  m.recipe.batch_size = 128;
  m.recipe.pad = 4, m.recipe.flip = true;
  if (name == "resnet18") {
    const int blocks[4] = {2, 2, 2, 2};
    resnet(m, false, blocks);
  } else if (name == "resnet50") {
    const int blocks[4] = {3, 4, 6, 3};
    resnet(m, true, blocks);
  } else {
    throw Error("unknown model '" + name + "'");
  }
  return m;
}

}  // namespace ember
