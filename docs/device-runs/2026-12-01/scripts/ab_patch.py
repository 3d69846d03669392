"""A/B only (device run F): put the pre-issue-18 softmax back into a copy of gluon_attn/fwd.py,
the scaled row max subtracted in one fused multiply-add (exp2(s*c - m*c)), and rename the
kernels' config tags with `_fma1` so the two forms share one tuning run's database."""
import pathlib, sys
root = pathlib.Path(sys.argv[1])
fwd = root / "aot/kernels/gluon_attn/fwd.py"
s = fwd.read_text()
pairs = [
    ("m_new = gl.maximum(m_i, gl.max(s, 1))\n    p = gl.exp2((s - gl.expand_dims(m_new, 1)) * qk_scale)\n    alpha = gl.exp2((m_i - m_new) * qk_scale)",
     "m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)\n    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))\n    alpha = gl.exp2(m_i - m_new)"),
    ("lse = m_i * sm_scale + gl.log2(l_i) * LN2", "lse = (m_i + gl.log2(l_i)) * LN2"),
]
for old, new in pairs:
    assert s.count(old) == 1, old
    s = s.replace(old, new)
fwd.write_text(s)
fam = root / "aot/kernels/gluon_attn/family.py"
t = fam.read_text()
old = "FWD_CONFIGS = (\n"
assert old in t
t = t.replace("def _fwd_steps(key: FunctionalKey, config) -> tuple[Step, ...]:",
              "FWD_CONFIGS = tuple({**c, 'fma': 1} for c in FWD_CONFIGS)\n\n\n"
              "def _fwd_steps(key: FunctionalKey, config) -> tuple[Step, ...]:")
fam.write_text(t)
print("patched", fwd, fam)
