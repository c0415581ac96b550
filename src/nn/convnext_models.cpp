// The built-in ConvNeXt models, their nodes named as the PyTorch modules' state_dict keys:
// "convnext-seed" and "convnext-fashion" follow the seed study's convnext.py (stem, cx_blocks of
// CXBlock.net, out), "convnext-atto" torchvision 0.14's ConvNeXt class (features, classifier).
#include <string>

#include "ember/error.h"
#include "ember/model.h"
#include "nn/model_spec.h"

namespace ember {

namespace {

LayerSpec spec(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  return named_spec(k, name, std::move(inputs));
}
// nn.LayerNorm([C, H, W]) of the study: over the whole sample, shape [C, H, W] even at 1x1.
LayerSpec ln_chw(const std::string& name) {
  LayerSpec s = spec(LayerKind::LayerNorm, name);
  s.norm_dims = 3;
  return s;
}
LayerSpec conv(const std::string& name, int out, int kernel, int stride, int groups = 1, bool same = false) {
  LayerSpec s = spec(LayerKind::Conv2d, name);
  s.out = out;
  s.kernel_h = s.kernel_w = kernel;
  s.stride_h = s.stride_w = stride;
  s.groups = groups;
  s.same = same;
  return s;
}

// The study's ConvNext(img_size, num_classes, img_ch, blocks, channels): the stem, then per stage
// its CXBlocks (x + net(x), net = dw 7x7 conv to 4d, LayerNorm([4d, h, w]), 1x1, act, 1x1 to d) and
// a LayerNorm([d, h, w]) + 2x2/2 conv between stages, all in one Sequential `cx_blocks`; then
// `out` = AdaptiveAvgPool2d(1), Flatten, LayerNorm(d), Linear.
void study_convnext(Model& m, const int blocks[4], const int widths[4]) {
  m.layers.push_back(conv("stem.0", widths[0], 4, 4));
  m.layers.push_back(ln_chw("stem.1"));
  std::string last = "stem.1";
  int j = 0;
  for (int i = 0; i < 4; ++i) {
    const int d = widths[i];
    for (int b = 0; b < blocks[i]; ++b, ++j) {
      const std::string net = "cx_blocks." + std::to_string(j) + ".net.", in = last;
      m.layers.push_back(conv(net + "0", 4 * d, 7, 1, d, true));
      m.layers.push_back(ln_chw(net + "1"));
      m.layers.push_back(conv(net + "2", 4 * d, 1, 1));
      m.layers.push_back(spec(LayerKind::ReLU, net + "3"));
      m.layers.push_back(conv(net + "4", d, 1, 1));
      last = "cx_blocks." + std::to_string(j);
      m.layers.push_back(spec(LayerKind::Add, last, {in, net + "4"}));
    }
    if (i < 3) {
      m.layers.push_back(ln_chw("cx_blocks." + std::to_string(j++)));
      last = "cx_blocks." + std::to_string(j++);
      m.layers.push_back(conv(last, widths[i + 1], 2, 2));
    }
  }
  m.layers.push_back(spec(LayerKind::GlobalAvgPool, "out.0"));
  m.layers.push_back(spec(LayerKind::Flatten, "out.1"));
  m.layers.push_back(spec(LayerKind::LayerNorm, "out.2"));
  LayerSpec fc = spec(LayerKind::Linear, "out.3");
  fc.out = m.num_classes;
  m.layers.push_back(fc);
}

// torchvision.models.convnext.ConvNeXt with CNBlockConfig (in, out, layers) settings, layer scale
// 1e-6, LayerNorm2d(eps 1e-6), GELU, no stochastic depth (the class's default).
void torchvision_convnext(Model& m, const int blocks[4], const int widths[4]) {
  auto ln2d = [](const std::string& name) {
    LayerSpec s = spec(LayerKind::LayerNorm2d, name);
    s.eps = 1e-6;
    return s;
  };
  m.layers.push_back(conv("features.0.0", widths[0], 4, 4));
  m.layers.push_back(ln2d("features.0.1"));
  std::string last = "features.0.1";
  for (int i = 0; i < 4; ++i) {
    const int d = widths[i], stage = 1 + 2 * i;
    for (int b = 0; b < blocks[i]; ++b) {
      const std::string blk = "features." + std::to_string(stage) + "." + std::to_string(b);
      m.layers.push_back(conv(blk + ".block.0", d, 7, 1, d, true));
      m.layers.push_back(ln2d(blk + ".block.2"));
      LayerSpec up = spec(LayerKind::Linear, blk + ".block.3");
      up.out = 4 * d;
      up.over_channels = true;
      m.layers.push_back(up);
      m.layers.push_back(spec(LayerKind::GELU, blk + ".block.4"));
      LayerSpec down = spec(LayerKind::Linear, blk + ".block.5");
      down.out = d;
      down.over_channels = true;
      m.layers.push_back(down);
      m.layers.push_back(spec(LayerKind::LayerScale, blk));
      m.layers.push_back(spec(LayerKind::Add, blk + ".sum", {last, blk}));
      last = blk + ".sum";
    }
    if (i < 3) {
      m.layers.push_back(ln2d("features." + std::to_string(stage + 1) + ".0"));
      m.layers.push_back(conv("features." + std::to_string(stage + 1) + ".1", widths[i + 1], 2, 2));
      last = "features." + std::to_string(stage + 1) + ".1";
    }
  }
  m.layers.push_back(spec(LayerKind::GlobalAvgPool, "avgpool"));
  m.layers.push_back(ln2d("classifier.0"));
  m.layers.push_back(spec(LayerKind::Flatten, "classifier.1"));
  LayerSpec fc = spec(LayerKind::Linear, "classifier.2");
  fc.out = m.num_classes;
  m.layers.push_back(fc);
}

}  // namespace

Model convnext_model(const std::string& name) {
  Model m;
  m.name = name;
  m.init = Init::Torch;  // PyTorch's default Conv2d/Linear init, as the study's code gets it
  // The study's recipe: AdamW lr 3e-4, weight decay 0.01, batch 128, no schedule.
  m.recipe.optimizer = "adamw";
  m.recipe.lr = 3e-4;
  m.recipe.weight_decay = 0.01;
  m.recipe.l2 = 0;
  m.recipe.batch_size = 128;
  m.recipe.schedule = "constant";
  if (name == "convnext-seed") {
    m.in_c = 3, m.in_h = m.in_w = 64, m.num_classes = 200;  // TinyImageNet, native 64x64 RGB
    m.recipe.pad = 4, m.recipe.flip = true;  // RandomCrop(64, padding=4), RandomHorizontalFlip
    const int blocks[4] = {3, 3, 9, 3}, widths[4] = {64, 96, 128, 256};
    study_convnext(m, blocks, widths);
  } else if (name == "convnext-fashion") {
    m.in_c = 1, m.in_h = m.in_w = 28, m.num_classes = 10;  // zero-padded to 32x32 first
    LayerSpec pad = spec(LayerKind::ZeroPad2d, "pad");
    pad.pad_h = pad.pad_w = 2;
    m.layers.push_back(pad);
    const int blocks[4] = {2, 2, 2, 2}, widths[4] = {32, 64, 128, 256};
    study_convnext(m, blocks, widths);
  } else if (name == "convnext-atto") {
    m.in_c = 3, m.in_h = m.in_w = 64, m.num_classes = 200;
    m.recipe.pad = 4, m.recipe.flip = true;
    m.init = Init::TruncNormal;  // torchvision's: trunc_normal_(std=0.02), biases 0
    const int blocks[4] = {2, 2, 6, 2}, widths[4] = {40, 80, 160, 320};
    torchvision_convnext(m, blocks, widths);
  } else {
    throw Error("unknown model '" + name + "'");
  }
  return m;
}

void set_block_activation(Model& m, LayerKind act) {
  int changed = 0;
  for (LayerSpec& s : m.layers) {
    const std::string& n = s.name;
    const bool study = n.size() > 6 && n.compare(n.size() - 6, 6, ".net.3") == 0;
    const bool tv = n.size() > 8 && n.compare(n.size() - 8, 8, ".block.4") == 0;
    if (study || tv) s.kind = act, ++changed;
  }
  if (changed == 0) throw Error("model " + m.name + " has no ConvNeXt block activation to replace");
}

}  // namespace ember
