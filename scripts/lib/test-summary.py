#!/usr/bin/env python3
"""The closing lines of scripts/test.sh, from what the run left behind:

    test-summary.py PHASES SKIPS BOOTS JUNIT...

PHASES: "name seconds" lines; SKIPS: the lines cachescope_testkit::skip appended (a skipped
test passed for the harness); BOOTS: the lines scripts/guest-qemu.sh appended, one per guest
boot; JUNIT: cargo-nextest's JUnit files (one per run). Prints the time of each phase, the ten
slowest tests, the guests' boots, each failed test with its own words (the panic and the checks
that failed: CI's log keeps the run's tail, where a test's full output may have been cut) and
one summary line; exits 0 (the phases' own exit statuses decide the run).
"""

import sys
import xml.etree.ElementTree as ET


def lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [l.rstrip("\n") for l in f if l.strip()]
    except FileNotFoundError:
        return []


def failure_words(case, most=24, width=300):
    """The lines that say why a test failed: nextest puts the panic (message and what follows
    it) in <failure>; the RDT machine's tests also print `check NAME: FAILED: ...` lines, which
    are kept from its stdout when the panic itself does not carry them."""
    text = ""
    for tag in ("failure", "error"):
        e = case.find(tag)
        if e is not None:
            text = (e.text or e.get("message") or "").strip()
            break
    out = []
    for l in text.splitlines():
        if l.startswith("stack backtrace:"):
            break  # the frames say where, the lines above say why
        if l.strip():
            out.append(l[:width])
    so = case.find("system-out")
    if so is not None and so.text:
        out += [l.strip()[:width] for l in so.text.splitlines() if ": FAILED: " in l and l.strip()[:width] not in out]
    if len(out) > most:
        out = out[: most - 1] + [f"... {len(out) - most + 1} more lines in the test's output above"]
    return out


def main():
    phases_path, skips_path, boots_path = sys.argv[1:4]
    junit_paths = sys.argv[4:]

    print("time of each phase:")
    total = 0
    for line in lines(phases_path):
        name, secs = line.rsplit(" ", 1)
        # A phase run beside the others takes no time of its own: not in the sum.
        if ", beside" not in name:
            total += int(secs)
        print(f"  {name:<34} {int(secs):>6} s")
    print(f"  {'all':<34} {total:>6} s")

    cases = []
    failed = []
    why = {}
    roots = []
    for junit_path in junit_paths:
        try:
            roots.append(ET.parse(junit_path).getroot())
        except (OSError, ET.ParseError) as e:
            print(f"no test results ({junit_path}: {e})")
    for root in roots:
        for suite in root.iter("testsuite"):
            for case in suite.iter("testcase"):
                name = f"{suite.get('name', '?')} {case.get('name', '?')}"
                secs = float(case.get("time", "0") or 0)
                bad = case.find("failure") is not None or case.find("error") is not None
                skipped = case.find("skipped") is not None
                cases.append((secs, name, bad, skipped))
                if bad:
                    failed.append(name)
                    why[name] = failure_words(case)

    if cases:
        print("the ten slowest tests:")
        for secs, name, bad, _ in sorted(cases, reverse=True)[:10]:
            print(f"  {secs:8.1f} s  {name}{'  (FAILED)' if bad else ''}")

    boots = [l.split("\t") for l in lines(boots_path)]
    if boots:
        secs = [float(b[0]) for b in boots]
        print(f"guest boots: {len(boots)}, {sum(secs):.0f} s in all; the slowest:")
        for b in sorted(boots, key=lambda b: -float(b[0]))[:10]:
            print("  " + "  ".join([f"{float(b[0]):6.0f} s"] + b[1:]))

    skips = lines(skips_path)
    if skips:
        print("skipped (cannot run on this host):")
        for s in skips:
            print("  " + s)
    if failed:
        print("failed:")
        for name in failed:
            print("  " + name)
            for line in why.get(name, []):
                print("    | " + line)
    ignored = sum(1 for c in cases if c[3])
    ran = len(cases) - ignored
    passed = ran - len(failed) - len(skips)
    print(f"summary: {passed} passed, {len(failed)} failed, {ignored + len(skips)} skipped")


if __name__ == "__main__":
    main()
