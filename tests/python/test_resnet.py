"""pytest tests of the built-in ResNets against torchvision 0.14 (issue 40): state_dicts load
strictly both ways (running statistics and num_batches_tracked as I64 included) with eval-mode
outputs within 1e-5 (bf16 products: 2e-2), and one epoch on a Fashion-MNIST slice from the same initial weights and
sample order agrees with PyTorch (train loss within 2 %, test accuracy within 1.5 points) at a
learning rate where PyTorch agrees with itself in fp64."""
import os
import sys

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "examples"))
from pytorch_eval import read_idx, read_safetensors, write_safetensors  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


def torchvision_resnet(name, classes, in_c, seed):
    torch.manual_seed(seed)
    net = getattr(torchvision.models, name)(num_classes=classes)
    if in_c != 3:  # the first conv takes the data's channels, as ember's does
        net.conv1 = torch.nn.Conv2d(in_c, 64, 7, 2, 3, bias=False)
    return net


def scramble_norms(net, seed):
    """Running statistics, scales and shifts away from their initial 0/1, and a batch count."""
    g = torch.Generator().manual_seed(seed)
    for mod in net.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            c = mod.num_features
            mod.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
            mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(c, generator=g) - 0.5)
            mod.num_batches_tracked.fill_(7)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_torchvision_state_dicts_load_strictly_both_ways(name, layout, tmp_path):
    net = torchvision_resnet(name, 10, 3, seed=1)
    with torch.no_grad():
        scramble_norms(net, 2)
    net.eval()
    path = str(tmp_path / "tv.safetensors")
    write_safetensors(path, net.state_dict(), {"format": "pt"})
    m = ember.Model.builtin(name)
    m.load(path)  # strict: every name, shape and dtype
    m.layout = layout
    assert m.layout == layout
    x = np.random.default_rng(3).random((2, 3, 64, 64), dtype=np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    got = m.predict(x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # bf16 products (on the amx set's tiles where the CPU has them): within 2 % of the largest
    # output of PyTorch's fp32 (measured 0.5-0.85 % on the amx, avx512, avx2 and scalar sets).
    m.precision = "bf16"
    got16 = m.predict(x)
    assert np.abs(got16 - want).max() <= 2e-2 * np.abs(want).max()
    assert np.abs(got16 - want).max() > 1e-5 * np.abs(want).max()  # bf16 did run: not the fp32 bits
    m.precision = "fp32"
    back = str(tmp_path / "ember.safetensors")
    m.save(back)
    tensors, _ = read_safetensors(back)
    assert tensors["bn1.num_batches_tracked"].dtype == torch.int64
    again = torchvision_resnet(name, 10, 3, seed=9)
    again.load_state_dict(tensors, strict=True)
    for k, v in net.state_dict().items():
        assert torch.equal(again.state_dict()[k], v), k


def fashion_slice(train_n, test_n):
    if not os.path.isdir(FASHION):
        pytest.skip(f"{FASHION} is missing (Debian's dataset-fashion-mnist)")
    x = read_idx(os.path.join(FASHION, "train-images-idx3-ubyte"))[:train_n, None]
    y = read_idx(os.path.join(FASHION, "train-labels-idx1-ubyte"))[:train_n].astype(np.int64)
    xt = read_idx(os.path.join(FASHION, "t10k-images-idx3-ubyte"))[:test_n, None]
    yt = read_idx(os.path.join(FASHION, "t10k-labels-idx1-ubyte"))[:test_n].astype(np.int64)
    return np.ascontiguousarray(x), y, np.ascontiguousarray(xt), yt


def torch_epoch(net, x, y, order, batch, lr):
    """One epoch of the recipe: SGD momentum 0.9, L2 5e-4 on conv and fc weights only."""
    decay = [p for n, p in net.named_parameters() if p.dim() > 1]
    rest = [p for n, p in net.named_parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest, "weight_decay": 0}],
                          lr=lr, momentum=0.9)
    net.train()
    total = 0.0
    xf = torch.from_numpy(x.astype(np.float32) / np.float32(255))
    for i in range(0, len(order), batch):
        idx = torch.as_tensor(order[i:i + batch])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xf[idx]), torch.from_numpy(y)[idx])
        loss.backward()
        opt.step()
        total += loss.item() * len(idx)
    return total / len(order)


# Training a ResNet at the recipe's lr is chaotic: PyTorch in fp32 and in fp64 from the same start
# already differ by 1.5-4 points of test accuracy after one short epoch (lr 0.01-0.1, measured), so
# the agreement is checked at lr 5e-4, where PyTorch fp32 and fp64 agree within 0.5 points and the
# comparison sees the implementation rather than the chaos (docs/models.md).
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_resnet18_one_epoch_agrees_with_pytorch(layout, tmp_path):
    x, y, xt, yt = fashion_slice(2048, 2000)
    net = torchvision_resnet("resnet18", 10, 1, seed=4)
    init = str(tmp_path / "init.safetensors")
    write_safetensors(init, net.state_dict(), {"format": "pt"})
    m = ember.Model.builtin("resnet18", input=(1, 28, 28), classes=10)
    m.load(init)
    m.layout = layout
    batch, lr = 64, 5e-4
    torch.set_num_threads(2)
    order = ember.epoch_order(len(x), seed=1, epoch=0)
    want_loss = torch_epoch(net, x, y, order, batch, lr)
    got = m.fit(x, y, epochs=1, batch_size=batch, lr=lr, threads=2, seed=1)[0]
    net.eval()
    with torch.no_grad():
        want_acc = (net(torch.from_numpy(xt.astype(np.float32) / np.float32(255))).argmax(1).numpy() == yt).mean()
    got_acc = m.evaluate(xt, yt)["accuracy"]
    print(f"resnet18 one epoch ({layout}): train loss ember {got['train_loss']:.4f} torch {want_loss:.4f}; "
          f"test accuracy ember {got_acc:.4f} torch {want_acc:.4f}")
    assert abs(got["train_loss"] - want_loss) <= 0.02 * want_loss
    assert abs(got_acc - want_acc) <= 0.015
