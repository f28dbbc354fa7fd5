#!/usr/bin/env python3
"""How often a generic draft predicts the host's next token (speculative decoding).

    QPU_HOST_TOKENS=/tmp/tokens40.txt story_profile 256 40
    python3 bench/draft_acceptance.py /tmp/tokens40.txt [N=8]

Input: story_profile's QPU_HOST_TOKENS file (id and name per forward, 'v' for a value
token). The draft knows nothing of the machine: prompt lookup over the tokens so far
(the most recent continuation of the longest suffix, n <= N, that occurred before).
Prints per family of the actual next token (digits as '#', as `qpu story --profile`
groups them): cycles and the share predicted right. A measurement for
docs/npu-machine.md ("What the second core could do"), not a test.
"""
import re, sys, collections

path = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 8
ids, names = [], []
for line in open(path):
    i, name = line.split()
    ids.append(int(i)); names.append(name)

def family(name):
    return 'value' if name == 'v' else re.sub(r'\d+', '#', name)

tables = [dict() for _ in range(N + 1)]
right = collections.Counter(); total = collections.Counter()
for t in range(len(ids) - 1):
    # predict ids[t+1] from ids[:t+1]
    guess = None
    for n in range(min(N, t + 1), 0, -1):
        key = tuple(ids[t + 1 - n:t + 1])
        if key in tables[n]:
            guess = tables[n][key]; break
    f = family(names[t + 1])
    total[f] += 1
    if guess == ids[t + 1]: right[f] += 1
    # learn: the continuation of every suffix ending at t
    for n in range(1, min(N, t + 1) + 1):
        tables[n][tuple(ids[t + 1 - n:t + 1])] = ids[t + 1]
all_t = sum(total.values()); all_r = sum(right.values())
print(f"{all_t} predictions, {all_r} right ({100*all_r/all_t:.1f} %), n <= {N}")
for f, c in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"{f:24s} {c:8d} {100*right[f]/c:6.1f} %")
