#!/usr/bin/env python3
"""How close each test of a ctest run came to its timeout (tools/sanitize.sh prints it).

usage: margin.py JUNIT_XML TESTS_JSON DEFAULT_TIMEOUT [SLOWEST]
JUNIT_XML is ctest's --output-junit file, TESTS_JSON `ctest --show-only=json-v1` (for each
test's TIMEOUT property; a test without one runs under DEFAULT_TIMEOUT, ctest's --timeout).
Prints the SLOWEST (default 5) tests with their time, timeout and the share of it they used,
then every test that used more than half of its timeout: it has less than a 2x margin, so a
machine twice as slow would time it out. Exit status 0 either way (a report, not a verdict).
"""
import json
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    junit, tests_json, default_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    slowest = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    timeouts = {}
    with open(tests_json, encoding="utf-8") as f:
        for test in json.load(f).get("tests", []):
            for prop in test.get("properties", []):
                if prop.get("name") == "TIMEOUT":
                    timeouts[test["name"]] = float(prop["value"])
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("status") in ("notrun", "disabled"):
            continue
        name = case.get("name", "?")
        seconds = float(case.get("time", "0"))
        timeout = timeouts.get(name, default_timeout)
        rows.append((seconds / timeout if timeout > 0 else 0.0, seconds, timeout, name))
    if not rows:
        return 0
    rows.sort(reverse=True)
    by_time = sorted(rows, key=lambda r: r[1], reverse=True)
    shown = min(slowest, len(rows))
    print(f"slowest {shown} of {len(rows)} tests run (time, timeout, share used):")
    for share, seconds, timeout, name in by_time[:slowest]:
        print(f"  {seconds:8.1f} s  {timeout:6.0f} s  {100 * share:5.1f}%  {name}")
    tight = [r for r in rows if r[0] > 0.5]
    if tight:
        print(f"{len(tight)} tests used more than half of their timeout (less than a 2x margin):")
        for share, seconds, timeout, name in tight:
            print(f"  {seconds:8.1f} s  {timeout:6.0f} s  {100 * share:5.1f}%  {name}")
    else:
        print(f"every test finished within half of its timeout (the closest: "
              f"{100 * rows[0][0]:.1f}%, {rows[0][3]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
