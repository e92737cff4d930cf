"""A diffusion-transformer (DiT) denoising loop with random weights: the workload cuptiprof's
README profiles.

    python examples/denoise.py --size small --warmup 2 --steps 8
    python -m cuptiprof run -o denoise.duckdb -- python examples/denoise.py

Per denoising step: classifier-free guidance (the batch doubled), patch embedding, timestep and
class conditioning (adaLN-Zero), N transformer blocks (layer norm, attention, MLP), a DDIM
scheduler step, a host copy of the latents (a preview) and a synchronisation. After the loop a
small convolutional decoder turns latents into an image. Warm-up is marked with a range named
"warmup", each denoising step with a range "step" (cuptiprof.range when cuptiprof is installed,
plain NVTX otherwise), so `cuptiprof run --step-range step` works either way. With --no-markers
it marks nothing, like code you cannot edit; cuptiprof then finds the steps itself:

    python -m cuptiprof run --step-fn __main__:main.denoise_step --warmup 2 -- \
        python examples/denoise.py --no-markers --warmup 0
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("denoise")

# hidden size, depth, heads, latent side, patch, decoder width
SIZES = {
    "tiny": dict(hidden=96, depth=2, heads=4, latent=16, patch=2, dec=16),
    "small": dict(hidden=192, depth=4, heads=6, latent=16, patch=2, dec=32),
    "medium": dict(hidden=768, depth=12, heads=12, latent=32, patch=2, dec=128),
    "large": dict(hidden=1152, depth=28, heads=16, latent=64, patch=2, dec=256),   # DiT-XL/2, 512 px
    "xl": dict(hidden=1152, depth=28, heads=16, latent=128, patch=2, dec=256),     # DiT-XL/2, 1024 px
}
LATENT_CHANNELS = 4
NUM_CLASSES = 1000


# -- markers: cuptiprof.range when installed, plain NVTX otherwise ------------------------------
def _markers():
    try:
        import cuptiprof

        return lambda name, **kw: cuptiprof.range(name, **kw)
    except Exception:
        pass
    if torch.cuda.is_available():
        @contextlib.contextmanager
        def nvtx_range(name, **kw):
            torch.cuda.nvtx.range_push(name)
            try:
                yield
            finally:
                torch.cuda.nvtx.range_pop()
        return nvtx_range
    try:
        import nvtx

        return lambda name, **kw: nvtx.annotate(name)
    except Exception:
        return lambda name, **kw: contextlib.nullcontext()


# -- model --------------------------------------------------------------------------------------
def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        half = self.freq // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(emb.to(self.mlp[0].weight.dtype))


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * hidden, hidden))
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.adaLN(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), s1, sc1))
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, sc2))


class DiT(nn.Module):
    def __init__(self, hidden, depth, heads, latent, patch, **_):
        super().__init__()
        self.patch = patch
        self.x_embed = nn.Conv2d(LATENT_CHANNELS, hidden, kernel_size=patch, stride=patch)
        n = (latent // patch) ** 2
        self.pos = nn.Parameter(torch.randn(1, n, hidden) * 0.02)
        self.t_embed = TimestepEmbedder(hidden)
        self.y_embed = nn.Embedding(NUM_CLASSES + 1, hidden)   # last index: the null class (CFG)
        self.blocks = nn.ModuleList(DiTBlock(hidden, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))
        self.out = nn.Linear(hidden, patch * patch * LATENT_CHANNELS)

    def forward(self, x, t, y):
        b, _, h, w = x.shape
        p = self.patch
        tokens = self.x_embed(x).flatten(2).transpose(1, 2) + self.pos
        c = self.t_embed(t) + self.y_embed(y)
        for blk in self.blocks:
            tokens = blk(tokens, c)
        shift, scale = self.adaLN(c).chunk(2, dim=1)
        tokens = self.out(modulate(self.norm(tokens), shift, scale))
        tokens = tokens.reshape(b, h // p, w // p, p, p, LATENT_CHANNELS)
        return torch.einsum("nhwpqc->nchpwq", tokens).reshape(b, LATENT_CHANNELS, h, w)


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.n1 = nn.GroupNorm(8, ch)
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.n2 = nn.GroupNorm(8, ch)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return x + self.c2(F.silu(self.n2(self.c1(F.silu(self.n1(x))))))


class Decoder(nn.Module):
    """A VAE-style decoder: latents (4 channels) -> RGB at 8x the latent resolution."""

    def __init__(self, dec, **_):
        super().__init__()
        self.inp = nn.Conv2d(LATENT_CHANNELS, dec, 3, padding=1)
        layers = []
        for _ in range(3):
            layers += [ResBlock(dec), nn.Upsample(scale_factor=2, mode="nearest"),
                       nn.Conv2d(dec, dec, 3, padding=1)]
        self.up = nn.Sequential(*layers)
        self.outp = nn.Sequential(nn.GroupNorm(8, dec), nn.SiLU(), nn.Conv2d(dec, 3, 3, padding=1))

    def forward(self, z):
        return self.outp(self.up(self.inp(z / 0.18215))).clamp(-1, 1)


class DDIMScheduler:
    """Deterministic DDIM (eta = 0) over a linear beta schedule of 1000 training steps."""

    def __init__(self, num_steps, device):
        betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
        self.alphas = torch.cumprod(1 - betas, 0).float()
        self.timesteps = torch.linspace(999, 0, num_steps).round().long()
        self.device = device

    def step(self, eps, t_index, latents):
        t = int(self.timesteps[t_index])
        prev = int(self.timesteps[t_index + 1]) if t_index + 1 < len(self.timesteps) else -1
        a_t = self.alphas[t]
        a_prev = self.alphas[prev] if prev >= 0 else torch.tensor(1.0)
        x0 = (latents - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps


# -- the loop -----------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="small",
                   help=f"model preset ({', '.join(SIZES)}) or HIDDEN,DEPTH,HEADS,LATENT (default: small)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up denoising steps (default 2)")
    p.add_argument("--steps", type=int, default=8, help="denoising steps (default 8)")
    p.add_argument("--batch", type=int, default=1, help="images per step (default 1; CFG doubles it)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="compute dtype (default: bfloat16 on a GPU, float32 on the CPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the transformer")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu (default: cuda when available)")
    p.add_argument("--guidance", type=float, default=4.0, help="classifier-free guidance scale")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-markers", action="store_true",
                   help="mark no warm-up or step ranges (unmodified code: use --step-fn)")
    args = p.parse_args(argv)
    if args.size in SIZES:
        args.cfg = dict(SIZES[args.size])
    else:
        try:
            hidden, depth, heads, latent = (int(v) for v in args.size.split(","))
        except ValueError:
            p.error(f"--size {args.size!r}: a preset ({', '.join(SIZES)}) or HIDDEN,DEPTH,HEADS,LATENT")
        if min(hidden, depth, heads, latent) < 1:
            p.error(f"--size {args.size!r}: HIDDEN, DEPTH, HEADS and LATENT must be at least 1")
        if hidden % heads or latent % 2:
            p.error(f"--size {args.size!r}: HIDDEN must divide by HEADS and LATENT must be even")
        args.cfg = dict(hidden=hidden, depth=depth, heads=heads, latent=latent, patch=2, dec=64)
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        p.error("--steps and --batch must be at least 1, --warmup at least 0")
    try:
        torch.device(args.device if args.device != "auto" else "cpu")
    except RuntimeError:
        p.error(f"--device {args.device!r}: expected cuda, cuda:N or cpu")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    device = torch.device(args.device if args.device != "auto" else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"denoise.py: --device {args.device}: no CUDA device available", file=sys.stderr)
        return 2
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *a: None)
    mark = (lambda name, **kw: contextlib.nullcontext()) if args.no_markers else _markers()
    torch.manual_seed(args.seed)
    cfg = args.cfg

    model = DiT(**cfg).to(device, dtype).eval()
    decoder = Decoder(**cfg).to(device, dtype).eval()
    if args.compile:
        model = torch.compile(model)
    sched = DDIMScheduler(args.steps, device)
    b, side = args.batch, cfg["latent"]
    labels = torch.randint(0, NUM_CLASSES, (b,))
    y = torch.cat([labels, torch.full_like(labels, NUM_CLASSES)]).to(device, non_blocking=cuda)
    pin = dict(pin_memory=True) if cuda else {}
    preview = torch.empty((b, LATENT_CHANNELS, side, side), dtype=dtype, **pin)
    params = sum(p.numel() for p in model.parameters())
    log.info("model: %s (%.1fM parameters), %d tokens, batch %d, %s on %s",
             args.size, params / 1e6, (side // cfg["patch"]) ** 2, b, str(dtype).split(".")[-1], device)

    def denoise_step(latents, i):
        # the timestep lives on the host (the scheduler's table) and is copied per step
        t = sched.timesteps[i].repeat(2 * b).to(device, non_blocking=cuda)
        x = torch.cat([latents, latents])
        with mark("transformer"):
            eps_c, eps_u = model(x, t, y).chunk(2)
        with mark("scheduler"):
            eps = eps_u + args.guidance * (eps_c - eps_u)
            latents = sched.step(eps.float(), i, latents.float()).to(dtype)
        preview.copy_(latents, non_blocking=cuda)   # device -> host (a progress preview)
        sync()
        return latents

    with torch.inference_mode():
        noise = torch.randn((b, LATENT_CHANNELS, side, side), generator=torch.Generator().manual_seed(args.seed))
        if args.warmup:
            with mark("warmup"):
                lat = noise.to(device, dtype, non_blocking=cuda)
                for i in range(args.warmup):
                    lat = denoise_step(lat, i % args.steps)
                decoder(lat)
                sync()
        log.info("denoising %d steps", args.steps)
        latents = noise.to(device, dtype, non_blocking=cuda)   # host -> device
        times = []
        t0 = time.perf_counter()
        for i in range(args.steps):
            s = time.perf_counter()
            with mark("step", step=i):
                latents = denoise_step(latents, i)
            times.append(time.perf_counter() - s)
        log.info("decode started")
        with mark("decode"):
            image = decoder(latents).float().cpu()
            sync()
        total = time.perf_counter() - t0
    times.sort()
    print(f"denoise: {args.steps} steps, median {1e3 * times[len(times) // 2]:.2f} ms/step, "
          f"total {1e3 * total:.1f} ms, image {tuple(image.shape)}, mean {image.mean().item():+.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
