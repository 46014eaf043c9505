"""Optional comparison: FlashInfer's chain_speculative_sampling on the same shapes as
device_check bench (batch 1 and 64, k in {1, 4, 8}, V in {151936, 262144}). FlashInfer takes
probabilities, so the time of the softmax that makes them is reported too.
Usage: python3 bench_flashinfer.py OUT.json   (exits 0 with a note when FlashInfer is absent)
"""

import json
import sys


def main(out_path):
    try:
        import flashinfer
        import torch
        from flashinfer.sampling import chain_speculative_sampling
    except Exception as exc:
        print(f"FlashInfer comparison skipped: {exc}")
        json.dump({"skipped": str(exc)}, open(out_path, "w"))
        return 0
    dev = torch.device("cuda")
    runs = []

    def call(draft_probs, draft_ids, target_probs):
        try:
            return chain_speculative_sampling(
                draft_probs, draft_ids, target_probs, deterministic=True
            )
        except TypeError:  # older releases take the uniforms explicitly
            b, k = draft_ids.shape
            u = torch.rand(b, k + 1, device=dev)
            return chain_speculative_sampling(draft_probs, draft_ids, u, target_probs)

    def timed(fn, reps):
        fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / reps * 1e3  # us

    for V in (151936, 262144):
        for B in (1, 64):
            for k in (1, 4, 8):
                logits = torch.randn(B, k + 1, V, device=dev) * 3
                target = torch.softmax(logits, -1)
                draft = torch.softmax(torch.randn(B, k, V, device=dev) * 3, -1)
                ids = torch.multinomial(draft.view(-1, V), 1).view(B, k).to(torch.int32)
                reps = 100 if B == 1 else 10
                t_chain = timed(lambda: call(draft, ids, target), reps)  # noqa: B023 (called here)
                t_soft = timed(lambda: torch.softmax(logits, -1), reps)  # noqa: B023 (called here)
                bytes_read = (B * (k + 1) * V + B * k * V) * 4
                runs.append(
                    {
                        "V": V,
                        "batch": B,
                        "k": k,
                        "us_chain": t_chain,
                        "us_softmax": t_soft,
                        "GBps_chain_probs_read": bytes_read / (t_chain * 1e-6) / 1e9,
                    }
                )
                print(runs[-1])
    json.dump(
        {"flashinfer": getattr(flashinfer, "__version__", "?"), "runs": runs},
        open(out_path, "w"),
        indent=1,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "flashinfer.json"))
