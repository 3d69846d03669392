"""Twin ratios of an A/B tuning run: old time / new time for every candidate NAME and NAME_TAG
timed at the same key, geomean per config (and head dim) and per key's best of each side.
    python3 twins.py TUNED.jsonl TAG"""
import json, math, sys, collections
path, tag = sys.argv[1], "_" + sys.argv[2]
per_cfg = collections.defaultdict(list)
best = collections.defaultdict(list)
for line in open(path):
    e = json.loads(line)
    c = e.get("candidates")
    if not c:
        continue
    k = e
    old = {n: t for n, t in c.items() if not n.endswith(tag)}
    new = dict(old)
    new.update({n[: -len(tag)]: t for n, t in c.items() if n.endswith(tag)})
    old_best, new_best = min(old.values()), min(new.values())
    best[(k["head_dim"], k["causal"])].append(old_best / new_best)
    for n, t in c.items():
        if n.endswith(tag) and n[: -len(tag)] in c:
            cfg = n.split("/")[-1][: -len(tag)]
            per_cfg[(k["head_dim"], k["causal"], cfg)].append(c[n[: -len(tag)]] / t)
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print("head_dim causal config: pairs geomean min max (old/new, >1 = new faster)")
for key in sorted(per_cfg):
    xs = per_cfg[key]
    print(*key, len(xs), f"{g(xs):.3f} {min(xs):.3f} {max(xs):.3f}")
print("best per key, old kernels against each new one in its twin's place (old / new):")
for key in sorted(best):
    xs = best[key]
    print(*key, len(xs), f"{g(xs):.3f} {min(xs):.3f} {max(xs):.3f}")
