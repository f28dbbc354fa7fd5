#!/usr/bin/env python3
"""How often a generic draft predicts the host's next token (speculative decoding).

    QPU_HOST_TOKENS=/tmp/tokens40.txt story_profile 256 40
    python3 bench/draft_acceptance.py /tmp/tokens40.txt [suffix|lookup]

Input: story_profile's QPU_HOST_TOKENS file (id and name per forward, 'v' for a value
token). The drafts know nothing of the machine:
  suffix  prompt lookup over the tokens so far: what followed the most recent earlier
          occurrence of the longest suffix (n <= 8) (the eighteenth session's draft);
  lookup  runner::PromptLookup's draft (runner/prompt_lookup.h, the default): the
          candidates are the suffixes (n = 8 .. 1), then the token k = 1 .. 5 places
          before the last one; the first whose last two occurrences were followed by the
          same token wins, else the first found.
Prints how often confirmed and unconfirmed guesses are right, and per family of the actual next token (digits as '#', as `qpu story --profile`
groups them): cycles and the share predicted right. A measurement for
docs/npu-machine.md ("What the second core could do"), not a test.
"""
import re, sys, collections

path = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else 'lookup'
if mode not in ('suffix', 'lookup'):
    sys.exit(f"unknown draft '{mode}': suffix or lookup")
N, LAGS = 8, 5
ids, names = [], []
for line in open(path):
    i, name = line.split()
    ids.append(int(i)); names.append(name)

def family(name):
    return 'value' if name == 'v' else re.sub(r'\d+', '#', name)

def learn(table, key, nxt):
    e = table.get(key)
    table[key] = (nxt, e is not None and e[0] == nxt)  # (continuation, confirmed)

suffixes = [dict() for _ in range(N + 1)]
lags = [dict() for _ in range(LAGS + 1)]
right = collections.Counter(); total = collections.Counter(); kinds = collections.Counter()
for t in range(len(ids) - 1):
    # predict ids[t+1] from ids[:t+1]
    found = [suffixes[n].get(tuple(ids[t + 1 - n:t + 1])) for n in range(min(N, t + 1), 0, -1)]
    if mode == 'lookup':
        found += [lags[k].get(ids[t - k]) for k in range(1, LAGS + 1) if t - k >= 0]
    found = [e for e in found if e is not None]
    confirmed = [e for e in found if e[1]] if mode == 'lookup' else []
    guess = (confirmed or found or [(None, False)])[0][0]
    f = family(names[t + 1])
    total[f] += 1
    if guess == ids[t + 1]: right[f] += 1
    kinds[('confirmed' if confirmed else 'unconfirmed' if found else 'none', guess == ids[t + 1])] += 1
    # learn: the continuation of every context ending at t
    for n in range(1, min(N, t + 1) + 1):
        learn(suffixes[n], tuple(ids[t + 1 - n:t + 1]), ids[t + 1])
    for k in range(1, LAGS + 1):
        if t - k >= 0: learn(lags[k], ids[t - k], ids[t + 1])
all_t = sum(total.values()); all_r = sum(right.values())
print(f"{all_t} predictions, {all_r} right ({100*all_r/all_t:.1f} %), draft '{mode}'")
for kind in ('confirmed', 'unconfirmed'):
    n = kinds[(kind, True)] + kinds[(kind, False)]
    if n: print(f"  {kind} guesses: {n}, right {kinds[(kind, True)]} ({100*kinds[(kind, True)]/n:.1f} %)")
for f, c in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"{f:24s} {c:8d} {100*right[f]/c:6.1f} %")
