// The Python module `ember` (pybind11): models built in or from JSON, trained and run on numpy
// arrays read in place through the buffer protocol (uint8 images scaled by 1/255, or float32 as
// they are, finite), with the GIL released while ember works and Ctrl-C checked between steps.
// Settings are checked by the library code that checks the CLI's flags (ValueError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/onnx.h"
#include "ember/onnx_quant.h"
#include "ember/ops.h"
#include "ember/profile.h"
#include "ember/quant.h"
#include "ember_support/bench.h"
#include "ember_support/files.h"

#include "arrays.h"  // the numpy arguments: Samples, Truth, their checks

namespace py = pybind11;

namespace {
using ember_py::Samples, ember_py::Truth, ember_py::samples_of, ember_py::truth_of, ember_py::copy_sample,
    ember_py::load_batch, ember_py::check_signals;

// f() with ember's errors about an argument (the library's checks, which the CLI's flags go
// through too; Python's argument names are the library's field names) raised as ValueError.
template <class F>
auto as_value_error(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const ember::Error& e) {
    throw py::value_error(e.what());
  }
}
std::string same_name(const char* field) { return field; }

// A model and, once trained or loaded, its plan (rebuilt, weights carried over, when fit asks
// for another batch size, optimizer or thread count).
class PyModel {
 public:
  explicit PyModel(ember::Model m) : model_(std::move(m)) {}
  // An empty model for the builder: input [C, H, W] and the class count.
  // An empty model for the builder: input (C, H, W), or (F,) for vectors [N, F] (held as [F, 1, 1]),
  // the class count, and the loss.
  PyModel(std::vector<int> input, int classes, const std::string& name, const std::string& loss) {
    if (input.size() == 1) input = {input[0], 1, 1};
    if (input.size() != 3 || input[0] < 1 || input[1] < 1 || input[2] < 1)
      throw py::value_error("input: expected (C, H, W) or (F,), each at least 1");
    as_value_error([&] { ember::check_integer("classes", classes, 2, 1 << 20); });  // a model description's range
    model_.name = name;
    model_.in_c = input[0], model_.in_h = input[1], model_.in_w = input[2], model_.num_classes = classes;
    model_.init = ember::Init::Torch;
    set_loss(loss);
  }
  std::string loss() const { return ember::loss_kind_name(model_.loss); }
  // The loss fit and evaluate use (a plan already built is rebuilt with the same weights).
  void set_loss(const std::string& name) {
    for (ember::LossKind k : {ember::LossKind::SoftmaxCrossEntropy, ember::LossKind::CrossEntropy, ember::LossKind::MSE, ember::LossKind::L1})
      if (name == ember::loss_kind_name(k)) {
        if (k == model_.loss) return;
        model_.loss = k;
        if (plan_) rebuild(plan_->options());
        return;
      }
    throw py::value_error("loss: expected 'softmax_cross_entropy', 'cross_entropy', 'mse' or 'l1', found '" + ember::clip_text(name) + "'");
  }
  // Builder steps: each appends to the model (dropping any plan: the next fit builds a new one).
  template <class F>
  PyModel& build(F f) {
    plan_.reset(), onnx_dims_.reset();  // another graph than the file's
    f(model_);
    return *this;
  }
  // A built-in model, for data of `input` (C, H, W) and `classes` when given (as the CLI fits a
  // built-in to its data set: the input, and the last Linear's outputs).
  static PyModel builtin(const std::string& name, const std::optional<std::vector<int>>& input, int classes) {
    ember::Model m = ember::builtin_model(name);
    if (input) {
      if (input->size() != 3 || (*input)[0] < 1 || (*input)[1] < 1 || (*input)[2] < 1)
        throw py::value_error("input: expected (C, H, W), each at least 1");
      m.in_c = (*input)[0], m.in_h = (*input)[1], m.in_w = (*input)[2];
    }
    if (classes != 0) {
      as_value_error([&] { ember::check_integer("classes", classes, 2, 1 << 20); });
      if (m.layers.empty() || m.layers.back().kind != ember::LayerKind::Linear)
        throw py::value_error("classes: model " + name + " does not end in a linear layer");
      m.layers.back().out = m.num_classes = classes;
    }
    return PyModel(std::move(m));
  }
  // A model imported from an ONNX file, with the file's weights (loaded into its first plan).
  static PyModel from_onnx(const std::string& path) {
    ember::OnnxImport im;
    {
      py::gil_scoped_release nogil;
      im = ember::import_onnx(path);
    }
    PyModel m(im.model);
    if (im.quantized) {  // a QDQ or integer-op file: its int8 model too, which runs (precision "int8")
      py::gil_scoped_release nogil;
      m.quant_ = std::make_shared<const ember::QuantizedWeights>(ember::import_onnx_quantized(path));
      m.int8_ = true;
    }
    m.onnx_dims_ = im.output_dims;
    m.onnx_weights_ = std::make_shared<ember::OnnxImport>(std::move(im));
    return m;
  }
  // JSON text when it holds a '{' or starts with '[' (after blanks), else a path. Errors quote at
  // most a few dozen characters of either (the library's JSON errors already cut what they quote).
  static PyModel from_json(const std::string& path_or_text) {
    const size_t first = path_or_text.find_first_not_of(" \t\r\n");
    const bool text = path_or_text.find('{') != std::string::npos || (first != std::string::npos && path_or_text[first] == '[');
    if (text) return PyModel(ember::parse_model_json(path_or_text, "<json>"));
    if (path_or_text.size() > PATH_MAX)
      throw py::value_error("path_or_text: '" + ember::clip_text(path_or_text) + "' is neither JSON text (no '{') nor a path (longer than " +
                            std::to_string(PATH_MAX) + " bytes)");
    return PyModel(ember::load_model_file(path_or_text));
  }
  std::string name() const { return model_.name; }
  std::string to_json() const { return ember::model_to_json(model_); }

  py::list fit(const py::buffer& x, const py::array& y, int epochs, int batch_size, const std::string& optimizer, double lr,
               int threads, uint64_t seed, const py::object& callback) {
    refuse_int8("fit");
    const Samples s = samples_of(x, model_, "x");
    const Truth truth = truth_of(y, s.n, model_);
    const ember::PlanOptions o =
        options(batch_size, model_.recipe.batch_size, threads, optimizer.empty() ? model_.recipe.optimizer : optimizer);
    quant_.reset(), int8_plan_.reset();  // the weights move on: a quantization of the old ones is stale
    ember::TrainConfig cfg;  // fit's loop: a constant lr (0: the recipe's)
    cfg.epochs = epochs, cfg.schedule.lr = lr != 0 ? lr : model_.recipe.lr;
    as_value_error([&] { ember::validate(cfg, same_name); });
    ensure_plan(o, s.n, seed);
    const int B = plan_->batch();
    const double rate = cfg.schedule.lr;
    py::list history;
    std::vector<int64_t> order;
    const bool scores = truth.per == 0 && plan_->has_class_scores();  // accuracy: NaN without class scores
    for (int e = 0; e < epochs; ++e) {
      double loss_sum = 0;
      int64_t correct = 0;
      const auto t0 = std::chrono::steady_clock::now();
      {
        py::gil_scoped_release nogil;
        order = ember::epoch_order(s.n, seed, epoch_ + e);  // as train() draws it
        for (int64_t start = 0; start < s.n; start += B) {
          const int n = int(std::min<int64_t>(B, s.n - start));
          load_batch(*plan_, s, &truth, order.data() + start, n);
          plan_->forward(n);
          const double loss = plan_->loss(n, true);
          if (!std::isfinite(loss)) throw ember::Error("fit: the loss is " + std::to_string(loss) + " (lower lr?)");
          if (scores) correct += plan_->correct(n);
          plan_->backward_step(n, rate);
          loss_sum += loss * n;
          check_signals();
        }
      }
      py::dict m;
      m["epoch"] = epoch_ + e + 1;
      m["lr"] = rate;
      m["train_loss"] = loss_sum / double(s.n);
      m["train_acc"] = scores ? double(correct) / double(s.n) : std::nan("");
      m["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      m["samples_per_s"] = double(s.n) / std::max(1e-9, m["seconds"].cast<double>());
      history.append(m);
      if (!callback.is_none() && callback(m).is(py::bool_(false))) break;
    }
    epoch_ += epochs;
    return history;
  }

  // Outputs [N, *output] (float32) of the model in evaluation mode: [N, classes] for a classifier,
  // [N, C, H, W] for a feature map.
  py::array_t<float> predict(const py::buffer& x, int batch_size) {
    const Samples s = samples_of(x, model_, "x");
    std::vector<int> dims = as_value_error([&] { return ember::model_output_dims(model_); });
    if (onnx_dims_ && count_of(*onnx_dims_) == count_of(dims)) dims = *onnx_dims_;  // the ONNX graph's rank
    std::vector<py::ssize_t> shape{py::ssize_t(s.n)};
    size_t per = 1;
    for (int v : dims) shape.push_back(v), per *= size_t(v);
    py::array_t<float> out(shape);
    float* o = out.mutable_data();
    in_eval_batches(s, nullptr, batch_size, [&](ember::Plan& p, int64_t start, int n) {
      const float* y = static_cast<const float*>(p.output());
      std::memcpy(o + size_t(start) * per, y, size_t(n) * per * sizeof(float));
    });
    return out;
  }

  py::dict evaluate(const py::buffer& x, const py::array& y, int batch_size) {
    const Samples s = samples_of(x, model_, "x");
    const Truth truth = truth_of(y, s.n, model_);
    double loss_sum = 0;
    int64_t correct = 0;
    bool scores = false;
    in_eval_batches(s, &truth, batch_size, [&](ember::Plan& p, int64_t, int n) {
      loss_sum += p.loss(n, false) * n;
      scores = truth.per == 0 && p.has_class_scores();
      if (scores) correct += p.correct(n);
    });
    py::dict r;
    r["loss"] = loss_sum / double(s.n);
    r["accuracy"] = scores ? double(correct) / double(s.n) : std::nan("");
    return r;
  }

  // dtype "" saves as the model runs: "int8" (a quantized weight file) when its precision is int8,
  // else fp32; "fp32" and "bf16" save the fp32 weights (those that were quantized, after quantize).
  void save(const std::string& path, const std::string& dtype_arg) {
    const std::string dtype = !dtype_arg.empty() ? dtype_arg : int8_ ? "int8" : "fp32";
    if (dtype == "int8") {
      if (!quant_) throw py::value_error("dtype: 'int8' needs quantized weights: call Model.quantize(x_calib) first");
      py::gil_scoped_release nogil;
      ember::save_quantized(*quant_, path);
      return;
    }
    if (dtype != "fp32" && dtype != "bf16")
      throw py::value_error("dtype: expected 'fp32', 'bf16' or 'int8', found '" + ember::clip_text(dtype) + "'");
    if (!plan_) ensure_plan(default_options(), 1, 1);
    py::gil_scoped_release nogil;
    ember::save_weights(*plan_, path, dtype == "bf16" ? ember::WeightDtype::bf16 : ember::WeightDtype::f32);
  }
  // int8: a QDQ model (as `ember export Wq`), Q/DQ where the int8 plan rounds to u8.
  void save_onnx(const std::string& path) {
    if (int8_) {
      py::gil_scoped_release nogil;
      ember::export_onnx_quantized(ember::qdq_export_view(*quant_), path);
      return;
    }
    if (!plan_) ensure_plan(default_options(), 1, 1);
    py::gil_scoped_release nogil;
    ember::export_onnx(*plan_, path);
  }

  // `steps` training steps (as fit takes them, in order from the first sample) with the profiler
  // on; returns `ember profile --json`'s object. The weights are put back afterwards; the
  // optimizer's state (Adam moments, step count) moves on as after those steps.
  py::object profile(const py::buffer& x, const py::array& y, int steps, int batch_size, int threads) {
    const Samples s = samples_of(x, model_, "x");
    const Truth truth = truth_of(y, s.n, model_);
    as_value_error([&] { ember::check_integer("steps", steps, 1, 1000000); });
    // An int8 model runs inference only: its profile is of forwards (`ember profile --weights Wq`).
    ember::Plan& p = int8_ ? int8_plan_for(options(batch_size, 64, threads, model_.recipe.optimizer), s.n)
                           : (ensure_plan(options(batch_size, model_.recipe.batch_size, threads, model_.recipe.optimizer), s.n, 1), *plan_);
    const bool train = p.options().training;
    const int B = p.batch();
    std::string json;
    {
      py::gil_scoped_release nogil;
      std::vector<float> keep;  // a training step moves the weights: they are put back after
      if (train) keep.assign(static_cast<const float*>(std::as_const(p).param_data()),
                             static_cast<const float*>(std::as_const(p).param_data()) + p.param_count());
      auto restore = [&] {
        p.set_profiler(nullptr);
        if (train) std::memcpy(p.param_data(), keep.data(), keep.size() * sizeof(float));
      };
      ember::Profiler prof(p.threads(), int(p.units().size()));
      p.set_profiler(&prof);
      std::vector<int64_t> index(static_cast<size_t>(B));
      try {
        for (int64_t step = 0, start = 0; step < steps; ++step, start = (start + B) % s.n) {
          const int n = int(std::min<int64_t>(B, s.n - start));
          const int64_t t0 = prof.now_ns();
          std::iota(index.begin(), index.begin() + n, start);
          load_batch(p, s, &truth, index.data(), n);
          prof.record(0, ember::Phase::data, -1, t0, prof.now_ns());
          p.forward(n);
          if (train) {
            p.loss(n, true);
            p.backward_step(n, model_.recipe.lr);
          }
          prof.record(0, ember::Phase::step, -1, t0, prof.now_ns());
          prof.end_step(n);
          check_signals();
        }
      } catch (...) {
        restore();
        throw;
      }
      restore();
      const double peak = ember::measure_machine(p.isa_name()).peak_gflops_1t * p.threads();
      json = ember::profile_json(ember::summarize_profile(p, prof, peak));
    }
    return py::module_::import("json").attr("loads")(json);
  }

  // fp32 or bf16 weights (ember's or PyTorch's), or a quantized file (`ember quantize`, save with
  // dtype "int8") of this model: the precision becomes int8, and fp32 runs its dequantized weights.
  void load(const std::string& path) {
    if (!plan_) ensure_plan(default_options(), 1, 1);
    if (!ember::is_quantized_file(path)) {
      py::gil_scoped_release nogil;
      ember::load_weights(*plan_, path);
      quant_.reset(), int8_plan_.reset(), int8_ = false;
      return;
    }
    std::shared_ptr<ember::QuantizedWeights> q;
    {
      py::gil_scoped_release nogil;
      q = std::make_shared<ember::QuantizedWeights>(ember::load_quantized(path));
    }
    if (!same_network(q->model, model_))
      throw py::value_error(ember::quote_path(path) + ": its quantized model '" + ember::clip_text(q->model.name) +
                            "' is not this model '" + ember::clip_text(model_.name) + "' (layers or input differ)");
    if (q->values.size() != plan_->param_count())
      throw py::value_error(ember::quote_path(path) + ": holds " + std::to_string(q->values.size()) + " parameters, the model has " +
                            std::to_string(plan_->param_count()));
    std::memcpy(plan_->param_data(), q->values.data(), q->values.size() * sizeof(float));
    quant_ = std::move(q), int8_plan_.reset(), int8_ = true;
  }

  // Post-training quantization (docs/int8.md) of the current weights, activation ranges calibrated
  // on x_calib (taken as predict takes x) by method minmax, percentile or mse; the precision becomes
  // "int8" (predict, evaluate, save and save_onnx then run or write the int8 model).
  void quantize(const py::buffer& x, const std::string& method, double percentile, int threads, int weight_bits) {
    const Samples s = samples_of(x, model_, "x_calib");
    ember::QuantOptions qo;
    qo.method = as_value_error([&] { return ember::parse_calib_method(method, "method"); });
    if (!(percentile > 50 && percentile <= 100))
      throw py::value_error("percentile: expected a number in (50, 100], found " + std::to_string(percentile));
    if (s.n > (1 << 20)) throw py::value_error("x_calib: at most 1048576 samples, found " + std::to_string(s.n));
    if (weight_bits != 7 && weight_bits != 8) throw py::value_error("weight_bits: expected 7 or 8, found " + std::to_string(weight_bits));
    qo.percentile = percentile, qo.data = "python", qo.weight_bits = weight_bits;
    qo.threads = options(1, 1, threads, model_.recipe.optimizer).threads;  // checked as fit checks it
    if (!plan_) ensure_plan(default_options(), 1, 1);
    const float* w = static_cast<const float*>(std::as_const(*plan_).param_data());
    const std::vector<float> values(w, w + plan_->param_count());
    {
      py::gil_scoped_release nogil;
      std::vector<float> xs(size_t(s.n) * s.per);
      for (int64_t i = 0; i < s.n; ++i) copy_sample(s, i, xs.data() + size_t(i) * s.per);
      quant_ = std::make_shared<const ember::QuantizedWeights>(ember::quantize_model(model_, values, xs.data(), int(s.n), qo));
    }
    int8_plan_.reset(), int8_ = true;
  }

  std::string layout() const { return layout_; }
  // Model.layout: "auto", "nchw" or "nhwc" (PlanOptions::layout); a plan already built is rebuilt
  // at once in it (the same weights and optimizer state: parameters keep PyTorch's layouts).
  void set_layout(const std::string& l) {
    if (l != "auto" && l != "nchw" && l != "nhwc")
      throw py::value_error("layout: expected auto, nchw or nhwc, found '" + ember::clip_text(l) + "'");
    layout_ = l;
    if (!plan_ || plan_->options().layout == layout_) return;
    ember::PlanOptions o = plan_->options();
    o.layout = layout_;
    rebuild(o);
  }

  std::string denormals() const { return ember::denormals_name(denormals_); }
  // Model.denormals: "flush" (the default: flush-to-zero and denormals-are-zero while ember's
  // kernels run, the caller's mode restored after each call) or "keep" (exact IEEE); a plan
  // already built is rebuilt at once in it, with the same weights and optimizer state.
  void set_denormals(const std::string& d) {
    denormals_ = as_value_error([&] { return ember::parse_denormals(d, "denormals"); });
    int8_plan_.reset();
    if (!plan_ || plan_->options().denormals == denormals_) return;
    ember::PlanOptions o = plan_->options();
    o.denormals = denormals_;
    rebuild(o);
  }

  std::string precision() const { return int8_ ? "int8" : ember::precision_name(precision_); }
  // A plan already built is rebuilt at once in the new precision, with the same weights and
  // optimizer state (same layout), so predict and evaluate use it too. "int8" runs the quantized
  // weights of Model.quantize or load (ValueError when there are none).
  void set_precision(const std::string& p) {
    if (p == "int8") {
      if (!quant_) throw py::value_error("precision: 'int8' needs quantized weights: call Model.quantize(x_calib) or load a quantized file first");
      int8_ = true;
      return;
    }
    if (p != "fp32" && p != "bf16")
      throw py::value_error("precision: expected fp32 or bf16, or int8 (quantized weights), found '" + ember::clip_text(p) + "'");
    precision_ = ember::parse_precision(p, "precision");
    int8_ = false;
    if (!plan_ || plan_->precision() == precision_) return;
    ember::PlanOptions o = plan_->options();
    o.precision = precision_;
    rebuild(o);
  }

 private:
  void refuse_int8(const char* what) const {
    if (int8_)
      throw py::value_error(std::string(what) + ": the model's precision is int8, which runs inference only; set Model.precision = 'fp32' "
                            "to train (and quantize again after)");
  }
  // Whether two models are one network (layers and input; names and recipes may differ).
  static bool same_network(ember::Model a, const ember::Model& b) {
    a.name = b.name, a.recipe = b.recipe, a.init = b.init;
    return ember::model_to_json(a) == ember::model_to_json(b);
  }

  // The int8 plan of quant_ for o's batch (at most n) and threads: the one kept, or made again.
  ember::Plan& int8_plan_for(const ember::PlanOptions& o, int64_t n) {
    const int B = int(std::min<int64_t>(o.batch, n));
    if (!int8_plan_ || int8_plan_->batch() != B || int8_plan_->threads() != o.threads)
      int8_plan_ = std::make_unique<ember::Plan>(*quant_, ember::int8_plan_options(B, o.threads, "", denormals_));
    return *int8_plan_;
  }

  // The plan again for o (the same model layout), with the same weights, optimizer state and mode.
  void rebuild(const ember::PlanOptions& o) {
    auto next = std::make_unique<ember::Plan>(model_, o);
    std::memcpy(next->param_data(), std::as_const(*plan_).param_data(), plan_->param_count() * sizeof(float));
    for (int s = 0; s < plan_->state_count(); ++s)
      std::memcpy(next->state_data(s), plan_->state_data(s), plan_->param_count() * sizeof(float));
    next->set_optimizer_steps(plan_->optimizer_steps());
    next->set_train_mode(plan_->train_mode());
    plan_ = std::move(next);
  }

  struct EvalMode {
    ember::Plan& p;
    bool was;
    explicit EvalMode(ember::Plan& q) : p(q), was(q.train_mode()) { p.set_train_mode(false); }
    ~EvalMode() { p.set_train_mode(was); }
  };

  // Forward passes over s in order, in evaluation mode without the GIL; after each batch of n
  // samples from `start`, fn(start, n) reads the plan.
  // The plan is the int8 one where the precision is int8.
  template <class Fn>
  void in_eval_batches(const Samples& s, const Truth* truth, int batch_size, Fn fn) {
    const ember::PlanOptions o = options(batch_size, 64, 0, model_.recipe.optimizer);  // checked even when a plan exists
    if (!int8_ && !plan_) ensure_plan(o, s.n, 1);
    ember::Plan& p = int8_ ? int8_plan_for(o, s.n) : *plan_;
    py::gil_scoped_release nogil;
    EvalMode mode(p);
    const int B = p.batch();
    std::vector<int64_t> index(static_cast<size_t>(B));
    for (int64_t start = 0; start < s.n; start += B) {
      const int n = int(std::min<int64_t>(B, s.n - start));
      std::iota(index.begin(), index.begin() + n, start);
      load_batch(p, s, truth, index.data(), n);
      p.forward(n);
      fn(p, start, n);
      check_signals();
    }
  }

  // The plan's settings from the arguments, checked as the CLI checks its flags (ValueError):
  // batch_size and threads 0 take the default (`batch`; the plan's threads, else 2).
  ember::PlanOptions options(int batch_size, int batch, int threads, const std::string& optimizer) const {
    ember::PlanOptions o;
    o.batch = batch_size != 0 ? batch_size : batch;
    o.threads = threads != 0 ? threads : (plan_ ? plan_->threads() : 2);
    o.optimizer.kind = as_value_error([&] { return ember::parse_optimizer(optimizer, "optimizer"); });
    o.optimizer.l2 = model_.recipe.l2, o.optimizer.weight_decay = model_.recipe.weight_decay;
    o.optimizer.decay_norms = model_.recipe.decay_norms;
    o.optimizer.momentum = model_.recipe.momentum;
    o.precision = precision_;
    o.layout = layout_;
    o.denormals = denormals_;
    as_value_error([&] { ember::validate(o, same_name); });
    return o;
  }
  ember::PlanOptions default_options() const { return options(1, 1, 0, model_.recipe.optimizer); }

  // The plan for o, at most n samples a batch: the current one when it matches, else a new one
  // (with the current one's weights, or fresh ones from `seed`).
  void ensure_plan(ember::PlanOptions o, int64_t n, uint64_t seed) {
    o.batch = int(std::min<int64_t>(o.batch, n));
    if (plan_ && plan_->batch() == o.batch && plan_->threads() == o.threads &&
        plan_->options().optimizer.kind == o.optimizer.kind && plan_->precision() == o.precision &&
        plan_->options().layout == o.layout && plan_->options().denormals == o.denormals)
      return;
    auto next = std::make_unique<ember::Plan>(model_, o);
    if (plan_) {  // the same model: the same flat parameter layout
      std::memcpy(next->param_data(), plan_->param_data(), plan_->param_count() * sizeof(float));
    } else {
      next->init_params(seed);
      if (onnx_weights_) ember::load_onnx_weights(*next, *onnx_weights_);
      onnx_weights_.reset();  // later plans copy from this one: the file's copy is not needed again
    }
    plan_ = std::move(next);
  }

  ember::Model model_;
  ember::Precision precision_ = ember::Precision::fp32;  // the next plan's (Model.precision)
  std::string layout_ = "auto";                          // the next plan's (Model.layout)
  ember::Denormals denormals_ = ember::Denormals::flush; // the next plan's (Model.denormals)
  std::unique_ptr<ember::Plan> plan_;
  int epoch_ = 0;
  std::shared_ptr<const ember::OnnxImport> onnx_weights_;  // from_onnx: the file's weights
  std::optional<std::vector<int>> onnx_dims_;              // from_onnx: its output's dims after N ([C, L], none)
  static size_t count_of(const std::vector<int>& d) {
    size_t n = 1;
    for (int v : d) n *= size_t(v);
    return n;
  }
  std::shared_ptr<const ember::QuantizedWeights> quant_;   // Model.quantize, or load of a quantized file
  bool int8_ = false;                                      // precision "int8": quant_ runs (int8_plan_)
  std::unique_ptr<ember::Plan> int8_plan_;                  // its plan (inference)
};

// A parameter-free activation's kind from its model-format name ("relu", "gelu-tanh", ...): the
// op table's activations.
ember::LayerKind act_kind(const std::string& name) {
  ember::LayerKind kind;
  if (!ember::find_activation(name, &kind))
    throw py::value_error("act: expected " + ember::activation_list() + ", found '" + ember::clip_text(name) + "'");
  return kind;
}

// Any op of the table by its JSON type and fields: layer("conv2d", out_channels=8, kernel=3).
// An int beyond 64 bits goes to the parser as int64's bound: its error shows the int's own digits.
ember::LayerSpec layer_spec(const std::string& type, const py::kwargs& fields) {
  std::vector<ember_py::HugeInt> huge;
  const std::string text = ember_py::layer_json(type, fields, &huge);
  std::string msg;
  try {
    ember::LayerSpec s = ember::parse_layer_json(text, "layer()");
    if (huge.empty()) return s;
    msg = "layer(): " + huge[0].field + ": expected an integer of at most 64 bits, found " + huge[0].exact;
  } catch (const ember::Error& e) {
    msg = e.what();
    for (const ember_py::HugeInt& h : huge) {
      const size_t at = msg.rfind(h.bound);
      if (msg.find(h.field) != std::string::npos && at != std::string::npos) msg.replace(at, h.bound.size(), h.exact);
    }
  }
  throw py::value_error(msg);
}

}  // namespace

PYBIND11_MODULE(ember, m) {
  m.doc() = "ember: CPU neural-network training and inference (C++), on numpy arrays";
  static py::exception<ember::Error> error(m, "Error", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ember::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
  m.def("ops", [] { return py::module_::import("json").attr("loads")(ember::ops_json(-1)); },
        "The op table (ember info --ops --json): {'ops': [{'name', 'onnx', 'layouts', 'dtypes', 'fields', 'params', "
        "'example', ...}]}");
  m.def("epoch_order", [](int64_t count, uint64_t seed, int epoch) {
        if (count < 1 || count > (int64_t(1) << 40)) throw py::value_error("count: expected 1 to 2^40");
        return ember::epoch_order(count, seed, epoch);
      }, py::arg("count"), py::arg("seed") = 1, py::arg("epoch") = 0,
      "The sample order fit(seed=seed) uses in its epoch `epoch` (0-based): reproduce a run elsewhere");
  py::class_<PyModel>(m, "Model", "A model: built in, from a JSON description, trained and run on numpy arrays")
      .def_static("builtin", &PyModel::builtin, py::arg("name"), py::arg("input") = py::none(), py::arg("classes") = 0,
                  "A built-in model: mnist-cnn, mnist-mlp, mxnet-mlp, convnext-seed, convnext-fashion, convnext-atto, "
                  "resnet18, resnet50; input (C, H, W) and classes: the data's (0, None: the model's own)")
      .def_static("from_json", &PyModel::from_json, py::arg("path_or_text"), "A model from a JSON description (a file path, or the text itself)")
      .def(py::init<std::vector<int>, int, const std::string&, const std::string&>(), py::arg("input"), py::arg("classes") = 10,
           py::arg("name") = "custom", py::arg("loss") = "softmax_cross_entropy",
           "An empty model for the builder methods: input (C, H, W), or (F,) for vectors [N, F]; the class count "
           "(the output a cross-entropy needs); the loss: softmax_cross_entropy, cross_entropy, mse or l1 "
           "(mse and l1 take targets of the output's shape, or class labels when the output is [classes])")
      .def_property("loss", &PyModel::loss, &PyModel::set_loss, "The loss fit and evaluate use")
      .def("conv2d", [](PyModel& m, int k, int r, int s, int p, int g) -> PyModel& { return m.build([&](ember::Model& x) { x.conv2d(k, r, s, p, g); }); },
           py::arg("out_channels"), py::arg("kernel"), py::arg("stride") = 1, py::arg("pad") = 0, py::arg("groups") = 1,
           py::return_value_policy::reference_internal)
      .def("linear", [](PyModel& m, int k) -> PyModel& { return m.build([&](ember::Model& x) { x.linear(k); }); },
           py::arg("out_features"), py::return_value_policy::reference_internal)
      .def("maxpool2d", [](PyModel& m, int k, int s, int p) -> PyModel& { return m.build([&](ember::Model& x) { x.maxpool2d(k, s, p); }); },
           py::arg("kernel"), py::arg("stride") = 0, py::arg("pad") = 0, py::return_value_policy::reference_internal)
      .def("avgpool2d", [](PyModel& m, int k, int s, int p) -> PyModel& { return m.build([&](ember::Model& x) { x.avgpool2d(k, s, p); }); },
           py::arg("kernel"), py::arg("stride") = 0, py::arg("pad") = 0, py::return_value_policy::reference_internal)
      .def("flatten", [](PyModel& m) -> PyModel& { return m.build([](ember::Model& x) { x.flatten(); }); },
           py::return_value_policy::reference_internal)
      .def("relu", [](PyModel& m) -> PyModel& { return m.build([](ember::Model& x) { x.relu(); }); },
           py::return_value_policy::reference_internal)
      .def("sigmoid", [](PyModel& m) -> PyModel& { return m.build([](ember::Model& x) { x.sigmoid(); }); },
           py::return_value_policy::reference_internal)
      .def("tanh", [](PyModel& m) -> PyModel& { return m.build([](ember::Model& x) { x.tanh(); }); },
           py::return_value_policy::reference_internal)
      .def("softmax", [](PyModel& m) -> PyModel& { return m.build([](ember::Model& x) { x.softmax(); }); },
           py::return_value_policy::reference_internal)
      .def("act", [](PyModel& m, const std::string& k) -> PyModel& {
             const ember::LayerKind kind = act_kind(k);
             return m.build([&](ember::Model& x) { x.act(kind); });
           }, py::arg("kind"), py::return_value_policy::reference_internal,
           ("Appends an activation: " + ember::activation_list()).c_str())
      .def("layer", [](PyModel& m, const std::string& type, const py::kwargs& fields) -> PyModel& {
             const ember::LayerSpec s = layer_spec(type, fields);
             return m.build([&](ember::Model& x) { x.layers.push_back(s); });
           }, py::arg("type"), py::return_value_policy::reference_internal,
           "Appends any op of the table by its model-format type and JSON fields (ember info --ops): "
           "layer('layernorm', eps=1e-6), layer('linear', out_features=10, bias=False)")
      .def("drop_path", [](PyModel& m, double p) -> PyModel& { return m.build([&](ember::Model& x) { x.drop_path(p); }); },
           py::arg("p"), py::return_value_policy::reference_internal, "Stochastic depth (off in predict/evaluate)")
      .def("concat", [](PyModel& m, std::vector<std::string> in) -> PyModel& { return m.build([&](ember::Model& x) { x.concat(in); }); },
           py::arg("inputs"), py::return_value_policy::reference_internal, "Concatenates named layers' outputs over channels")
      .def("reads", [](PyModel& m, std::vector<std::string> in) -> PyModel& { return m.build([&](ember::Model& x) { x.reads(in); }); },
           py::arg("inputs"), py::return_value_policy::reference_internal, "Sets the last layer's inputs (names, or \"input\")")
      .def("add", [](PyModel& m, std::vector<std::string> in) -> PyModel& { return m.build([&](ember::Model& x) { x.add(in); }); },
           py::arg("inputs"), py::return_value_policy::reference_internal, "The residual sum of the named layers' outputs")
      .def("named", [](PyModel& m, const std::string& n) -> PyModel& { return m.build([&](ember::Model& x) { x.named(n); }); },
           py::arg("name"), py::return_value_policy::reference_internal, "Names the last layer (for add and its parameters)")
      .def_property_readonly("name", &PyModel::name)
      .def_property("layout", &PyModel::layout, &PyModel::set_layout,
                    "'auto', 'nchw' or 'nhwc': the activations' layout of the plans (nhwc: channel-last wherever a "
                    "layer can, reorders at the edges; auto: nchw for now; weights and outputs keep PyTorch's layouts)")
      .def_property("denormals", &PyModel::denormals, &PyModel::set_denormals,
                    "'flush' (default) or 'keep': numbers below 2^-126 flushed to zero in ember's kernels "
                    "(flush-to-zero and denormals-are-zero on ember's threads and, for the length of each call, the "
                    "caller's, whose own mode is restored), or exact IEEE arithmetic")
      .def_property("precision", &PyModel::precision, &PyModel::set_precision,
                    "'fp32' or 'bf16': the matrix products' arithmetic for fit, predict, evaluate and profile "
                    "(bf16: operands rounded to bf16, products summed in fp32; weights stay fp32)")
      .def("to_json", &PyModel::to_json, "The model's JSON description")
      .def("fit", &PyModel::fit, py::arg("x"), py::arg("y"), py::arg("epochs") = 1, py::arg("batch_size") = 0,
           py::arg("optimizer") = "", py::arg("lr") = 0.0, py::arg("threads") = 0, py::arg("seed") = 1,
           py::arg("callback") = py::none(),
           "Trains on x [N, C, H, W] or [N, F] (uint8 scaled by 1/255, or float32) and integer labels y [N], or for the losses "
           "mse and l1 float targets y [N, *output]; returns one dict per epoch "
           "(epoch, lr, train_loss, train_acc, seconds, samples_per_s). callback(metrics) returning False stops. "
           "batch_size, optimizer, lr, threads: 0 or '' for the recipe's; checked as the CLI's flags are (ValueError).")
      .def("predict", &PyModel::predict, py::arg("x"), py::arg("batch_size") = 0, "Outputs [N, *output] (float32): [N, classes], or [N, C, H, W] for a feature map")
      .def("evaluate", &PyModel::evaluate, py::arg("x"), py::arg("y"), py::arg("batch_size") = 0, "{'loss', 'accuracy'}")
      .def("save", &PyModel::save, py::arg("path"), py::arg("dtype") = "",
           "Writes the weights (safetensors, PyTorch names); dtype 'bf16' rounds them to nearest even, 'int8' writes the "
           "quantized file (the default when the precision is int8, else 'fp32')")
      .def("load", &PyModel::load, py::arg("path"),
           "Reads weights written by save() or by PyTorch, or a quantized file (the precision becomes 'int8')")
      .def("quantize", &PyModel::quantize, py::arg("x_calib"), py::arg("method") = "minmax", py::arg("percentile") = 99.99,
           py::arg("threads") = 0, py::arg("weight_bits") = 8,
           "Post-training int8 quantization of the current weights, calibrated on x_calib; the precision becomes 'int8'")
      .def_static("from_onnx", &PyModel::from_onnx, py::arg("path"),
                  "A model imported from an ONNX file (torch.onnx.export, ember export, ...) with its weights")
      .def("save_onnx", &PyModel::save_onnx, py::arg("path"),
           "Writes the model and its weights as ONNX (opset 17, dynamic batch; output: the logits)")
      .def("profile", &PyModel::profile, py::arg("x"), py::arg("y"), py::arg("steps") = 20, py::arg("batch_size") = 0,
           py::arg("threads") = 0,
           "Profiles `steps` training steps (precision int8: `steps` forwards of the int8 plan); returns ember "
           "profile --json's dict (rows per layer and phase, % of the FMA peak). The weights are restored afterwards; "
           "the optimizer state moves on");
}
