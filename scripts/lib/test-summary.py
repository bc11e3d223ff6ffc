#!/usr/bin/env python3
"""The closing lines of scripts/test.sh, from what the run left behind:

    test-summary.py PHASES SKIPS BOOTS JUNIT...

PHASES: "name seconds" lines; SKIPS: the lines cachescope_testkit::skip appended (a skipped
test passed for the harness); BOOTS: the lines scripts/guest-qemu.sh appended, one per guest
boot; JUNIT: cargo-nextest's JUnit files (one per run). Prints the time of each phase, the ten
slowest tests, the guests' boots and one summary line; exits 0 (the phases' own exit
statuses decide the run).
"""

import sys
import xml.etree.ElementTree as ET


def lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [l.rstrip("\n") for l in f if l.strip()]
    except FileNotFoundError:
        return []


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
    ignored = sum(1 for c in cases if c[3])
    ran = len(cases) - ignored
    passed = ran - len(failed) - len(skips)
    print(f"summary: {passed} passed, {len(failed)} failed, {ignored + len(skips)} skipped")


if __name__ == "__main__":
    main()
