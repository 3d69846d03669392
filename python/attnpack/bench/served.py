"""Which kernel served a benchmark row, read from attnpack.torch.stats() (no torch here).

Kernel names are the archive's, "<family>/<op>/<key>/<config>", e.g.
"gluon/fwd/bf16-d128-causal/M64_N128_stages3"; the family is the first part.
"""
from __future__ import annotations

OP_KERNEL_OPS = {"fwd": ("fwd",), "bwd": ("bwd",), "fwdbwd": ("fwd", "bwd")}
NOT_REACHED = ("F.sdpa sends this call to neither the flash nor the efficient op "
               "(cuDNN or math serves it)")


def kernel_op(name: str) -> str | None:
    parts = name.split("/")
    return parts[1] if len(parts) >= 2 else None


def family_of(name: str) -> str:
    return name.split("/")[0]


def served_summary(stats: dict, op: str, entry: str | None) -> dict:
    """What served `op` during its timing, from stats reset just before it:
    - "served": every call of that op ran on the bundle; `kernels` {name: calls}, `families`;
    - "fallback": some calls ran on PyTorch's kernel; `fallbacks` {reason: calls}, `reason`;
    - "not reached": attnpack was never asked (F.sdpa chose cuDNN or math); `entry` is the op
      attnpack.torch.sdpa_entry() says F.sdpa reaches, None for neither.
    A "bwd" timing also runs one forward to build its graph: only kernels and fallbacks of the
    timed op count."""
    want = OP_KERNEL_OPS[op]
    kernels = {name: n for name, n in sorted(stats.get("calls", {}).items())
               if kernel_op(name) in want}
    fallback_calls = sum(counts.get("fallback", 0) for entry_op, counts in stats.get("ops", {}).items()
                         if entry_op.rsplit("_", 1)[-1] in want)
    reasons = dict(sorted(stats.get("fallbacks", {}).items())) if fallback_calls else {}
    families = sorted({family_of(name) for name in kernels})
    if fallback_calls:
        status, reason = "fallback", "; ".join(reasons) or "fallback (no reason recorded)"
    elif kernels:
        status, reason = "served", None
    elif entry is None:
        status, reason = "not reached", NOT_REACHED
    else:
        status, reason = "not reached", f"F.sdpa should reach the {entry} op, but no call was counted"
    return {"status": status, "kernels": kernels, "families": families, "fallbacks": reasons,
            "reason": reason}


def served_text(served: dict | None) -> str:
    """One cell: the kernels, or "fallback: <reason>", or "not reached: <reason>"."""
    if not served:
        return "-"
    if served["status"] == "served":
        return " + ".join(served["kernels"])
    head = f"{served['status']}: {served['reason']}"
    if served["kernels"]:  # part of the calls were served
        head += " (served: " + " + ".join(served["kernels"]) + ")"
    return head


def family_text(served: dict | None) -> str:
    if not served:
        return "-"
    if served["status"] == "served":
        return "+".join(served["families"])
    return served["status"]
