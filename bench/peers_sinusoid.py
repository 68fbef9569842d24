"""timestep_sinusoid in PyTorch, as diffusers writes it (get_timestep_embedding),
timed the way bench_jit times kjit: wall time per call including a stream sync."""
import math
import statistics
import time

import torch


def get_timestep_embedding(t, dim, flip_sin_to_cos=False, downscale_freq_shift=1.0, scale=1.0, max_period=10000):
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=t.device)
    exponent = exponent / (half - downscale_freq_shift)
    emb = torch.exp(exponent)
    emb = t[:, None].float() * emb[None, :]
    emb = scale * emb
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if dim % 2 == 1:
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


def main():
    dev = torch.device("cuda")
    for n in (64, 2048, 65536):
        t = (torch.arange(n, device=dev, dtype=torch.float32) % 1000) + 0.5
        for _ in range(20):
            get_timestep_embedding(t, 256, True, 0.0)
        torch.cuda.synchronize()
        v = []
        for _ in range(301):
            t0 = time.perf_counter()
            get_timestep_embedding(t, 256, True, 0.0)
            torch.cuda.synchronize()
            v.append(time.perf_counter() - t0)
        print(f"torch eager sinusoid n={n:<6d} d=256 fp32  {statistics.median(v) * 1e6:7.2f} us per call incl. sync (median of 301)")


if __name__ == "__main__":
    main()
