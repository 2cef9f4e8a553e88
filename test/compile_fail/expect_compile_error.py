#!/usr/bin/env python3
"""Passes when SOURCE fails to compile with EXPECTED in the compiler's messages, and compiles
with -DCUSTREAM_CONTROL (so the failure is the one the test is about).

usage: expect_compile_error.py SOURCE EXPECTED -- COMPILER [ARGS...]
"""
import subprocess
import sys


def main():
    source, expected = sys.argv[1], sys.argv[2]
    compiler = sys.argv[sys.argv.index('--') + 1:]
    base = compiler + ['-std=c++17', '-fsyntax-only', source]
    control = subprocess.run(base + ['-DCUSTREAM_CONTROL'], capture_output=True, text=True)
    if control.returncode != 0:
        print('FAIL: the control (-DCUSTREAM_CONTROL) does not compile:\n' + control.stderr)
        return 1
    bad = subprocess.run(base, capture_output=True, text=True)
    if bad.returncode == 0:
        print('FAIL: ' + source + ' compiled; it must not')
        return 1
    if expected not in bad.stderr:
        print('FAIL: it did not compile, but the messages lack "' + expected + '":\n' +
              bad.stderr)
        return 1
    print('PASS: refused with "' + expected + '"')
    return 0


if __name__ == '__main__':
    sys.exit(main())
