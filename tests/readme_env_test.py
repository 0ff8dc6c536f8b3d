"""README's table of environment variables against the library's (src/runtime/env.c): every
variable of WEAVE_ENV_TABLE but the tests' own (WEAVE_TEST_*) has a row, every row names a variable
of the table, a row's default is the table's (where the table's is empty, the row says in words
what applies), and the Hopper GEMM's integer knobs (hgemm_knobs[]) take the table's default and
range. Usage: readme_env_test.py ENV_C README"""
import re
import sys


def env_table(text):
    """name -> (type, default) of every X(...) entry of WEAVE_ENV_TABLE"""
    rows = re.findall(r'X\((WEAVE_[A-Z0-9_]+),\s*"([^"]*)",\s*"([^"]*)"', text)
    return {name: (typ, default) for name, typ, default in rows}


def hgemm_knobs(text):
    """name -> (lo, hi, default) of hgemm_knobs[]"""
    rows = re.findall(r'\{"(WEAVE_HGEMM_[A-Z0-9_]+)",\s*(-?\d+),\s*(-?\d+),\s*(-?\d+),\s*\'.\'\}', text)
    return {name: (int(lo), int(hi), int(d)) for name, lo, hi, d in rows}


def readme_rows(text):
    """name -> default cell (backticks removed) of every `| `WEAVE_...` | default | meaning |` row"""
    rows = re.findall(r"^\| `(WEAVE_[A-Z0-9_]+)` \| ([^|]*) \|", text, re.M)
    return {name: cell.strip().replace("`", "") for name, cell in rows}


def check(env_c, readme):
    """the list of disagreements (empty: they agree)"""
    table, knobs, rows = env_table(env_c), hgemm_knobs(env_c), readme_rows(readme)
    bad = []
    if len(table) < 10 or len(knobs) < 5 or len(rows) < 10:
        bad.append(f"parsed too little: {len(table)} variables, {len(knobs)} knobs, {len(rows)} README rows")
    for name, (typ, default) in table.items():
        if name.startswith("WEAVE_TEST_"):
            continue
        if name not in rows:
            bad.append(f"{name}: no row in README's table")
        elif default and rows[name] != default:
            bad.append(f"{name}: README says default {rows[name]!r}, env.c {default!r}")
        elif not default and not rows[name]:
            bad.append(f"{name}: README's default cell is empty")
    for name in rows:
        if name not in table:
            bad.append(f"{name}: in README's table, not in env.c's WEAVE_ENV_TABLE")
    for name, (lo, hi, default) in knobs.items():
        if name not in table:
            bad.append(f"{name}: a Hopper GEMM knob missing from WEAVE_ENV_TABLE")
            continue
        typ, tdefault = table[name]
        if tdefault != str(default):
            bad.append(f"{name}: knob default {default}, table default {tdefault!r}")
        if typ != f"{lo}..{hi}":
            bad.append(f"{name}: knob range {lo}..{hi}, table type {typ!r}")
    return bad


def main(env_c_path, readme_path):
    with open(env_c_path) as f:
        env_c = f.read()
    with open(readme_path) as f:
        readme = f.read()
    bad = check(env_c, readme)
    # the check must be able to fail: a changed default and a dropped row are caught
    table = env_table(env_c)
    name = next(n for n in sorted(table) if table[n][1] and not n.startswith("WEAVE_TEST_"))
    default = table[name][1]
    changed = readme.replace(f"| `{name}` | `{default}` |", f"| `{name}` | `{default}9` |", 1)
    dropped = "\n".join(line for line in readme.split("\n") if not line.startswith(f"| `{name}` |"))
    if changed == readme or not check(env_c, changed) or not check(env_c, dropped):
        bad.append(f"self-check: a changed or dropped row of {name} was not caught")
    for line in bad:
        print("FAIL", line)
    print(f"readme_env_test: {len(table)} variables, {len(readme_rows(readme))} README rows: "
          + ("FAILED" if bad else "PASSED"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
