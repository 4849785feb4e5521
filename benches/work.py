# Allocation-heavy Python: dicts, tuples, strings, JSON round trip, sorting.
import json, sys
n = int(sys.argv[1])
table = {}
for i in range(n):
    key = "k%07d" % (i * 7919 % 1000003)
    table[key] = {"id": i, "name": "item-%d" % i, "tags": [str(i % 13), str(i % 7)], "pair": (i, i * 2.5)}
text = json.dumps(table)
back = json.loads(text)
assert len(back) == len(table)
words = sorted(text.split('"'))
groups = {}
for w in words:
    groups.setdefault(len(w), []).append(w)
for k in list(table)[::2]:
    del table[k]
chunks = ["".join(words[i:i + 50]) for i in range(0, len(words), 50)]
print(n, len(text), len(groups), sum(map(len, chunks)))
