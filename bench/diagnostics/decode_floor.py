"""A decode call's fixed cost against its cost per byte (issue 43): one query
token per sequence, h 32/8, d 128, bf16, at batch 1 and 8, s_kv from 64 to
16k keys, each call replayed from a CUDA graph over 8 rotating sets (us per
call): decode_latency.py's variants (attn as bench/decode.py runs it, without
the append, without lengths, with one split) beside SDPA cuDNN and flash.
Where a row's time stops falling with s_kv is the call's floor; the slope
above it is its streaming rate. At s_kv 2048 and b 1 it also prints one
replay's first kernels (torch.profiler).

    PYTHONPATH=/tmp/py python3 bench/diagnostics/decode_floor.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_latency import ROT, capture, kernels_of, make_sets, replay_us, variants  # noqa: E402


def main():
    h_q, h_kv, d = 32, 8, 128
    for b in (1, 8):
        print(f"\n## b {b} h {h_q}/{h_kv} d {d}: us per call from graphs over {ROT} rotating sets")
        header = None
        for s_kv in (64, 256, 1024, 2048, 4096, 8192, 16384):
            sets = make_sets(b, s_kv, h_q, h_kv, d, ROT)
            impls = variants(sets, s_kv, h_q, h_kv, splits=(1,))
            if header is None:
                header = list(impls)
                print(f"{'s_kv':>6} {'MB':>7} " + " ".join(f"{n:>15}" for n in header))
            cells, shown = [], []
            for name, fn in impls.items():
                g = capture(fn, sets)
                cells.append(f"{replay_us(g, ROT):15.2f}")
                if b == 1 and s_kv == 2048 and name in ("attn", "sdpa_cudnn"):
                    shown.append((name, kernels_of(g)[:4]))
            print(f"{s_kv:6d} {2 * b * s_kv * h_kv * d * 2 / 1e6:7.2f} " + " ".join(cells), flush=True)
            for name, ks in shown:
                print(f"       {name}, one replay's first kernels (us, gap before it us):")
                for k in ks:
                    print(f"         {k[0][:64]:64} {k[1]:7.2f} {k[2]:7.2f}")


if __name__ == "__main__":
    main()
