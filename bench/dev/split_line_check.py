# split_line_check.py — used once (branch h/split): the lines of a file at 98cfd40 (g_ctx renamed
# gt_ctx, a leading "static " dropped) against the files it was split into, as multisets: prints
# the lines only in one side, so a lost case or assertion shows. Usage: python3 bench/dev/split_line_check.py
# tests/test_gpu_train.c tests/test_gpu_train.c tests/test_gpu_train_routes.c tests/support/tw_gpu_train.[ch]
import re, subprocess, sys, collections
orig = subprocess.run(['git', 'show', '98cfd40:' + sys.argv[1], ], capture_output=True, text=True).stdout
new = ''.join(open(f).read() for f in sys.argv[2:])
norm = lambda s: collections.Counter(re.sub(r'^static ', '', re.sub(r'\bg_ctx\b', 'gt_ctx', l)).strip() for l in s.split('\n') if l.strip())
o, n = norm(orig), norm(new)
print('--- only in original:'); [print('  %dx %s' % (c, l)) for l, c in (o - n).items()]
print('+++ only in split:'); [print('  %dx %s' % (c, l)) for l, c in (n - o).items()]
