"""Time the suite's own commands on this machine and, with ``--page``, rewrite the generated performance page.

Each command (tests, gate, replay, toy, report; on a GPU machine the GPU tests and report too) runs once as a
whole process; its output is kept out of the terminal, progress goes to stderr, the times to stdout. ``--page``
replaces this machine's row of ``docs/performance.json`` and regenerates ``docs/performance.md`` from it (the
only way those committed files change). Exit 0 when every command ran (whatever their own exit status, which
the table shows), 2 on bad input.
"""

from __future__ import annotations

import datetime
import json

from analysis.cli import policy
from analysis.present import performance_page
from repro.bench import command_times
from repro.core.errors import SuiteError
from repro.core.outputs import Output, check_outputs, write_text
from repro.core.paths import ROOT, suite_commit

PAGE_JSON, PAGE_MD = ROOT / "docs" / "performance.json", ROOT / "docs" / "performance.md"
#: The longest one command may run (the CPU report takes minutes on 2 loaded cores).
MAX_TIMEOUT_S = 3600


@policy.command("timings")
def main(argv: list[str] | None = None) -> int:
    names = ", ".join(t.name for t in command_times.TIMED)
    parser = policy.Parser("timings", description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated command names (of: {names}); default every one this machine runs")
    parser.add_argument("--timeout", type=float, default=1800, help=f"seconds one command may run (at most {MAX_TIMEOUT_S})")
    parser.add_argument("--json", type=policy.path, help="also write this run's row as JSON here")
    parser.add_argument("--logs", type=policy.path, help="keep each command's output here, as <name>.log "
                        "(default: dropped)")
    parser.add_argument("--page", action="store_true", help="replace this machine's row in docs/performance.json "
                        "and regenerate docs/performance.md (committed files: only this flag writes them)")
    args = parser.parse_args(argv)
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise SuiteError(f"--timeout must be above 0 and at most {MAX_TIMEOUT_S} s, not {args.timeout}")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    pages = [PAGE_JSON, PAGE_MD] if args.page else []
    check_outputs([Output("--json", args.json), Output("--logs", args.logs, folder=True),
                   *(Output("--page", p) for p in pages)], committed=pages)
    runs, left = command_times.measure(only, args.timeout, progress=policy.progress("timings"), logs=args.logs)
    what = {t.name: t.what for t in command_times.TIMED}
    row = {"machine": command_times.machine(), "date": datetime.date.today().isoformat(), "commit": suite_commit(),
           "runs": [{"name": r.name, "what": what[r.name], "wall_s": round(r.wall_s, 2), "cpu_s": round(r.cpu_s, 2),
                     "status": r.status} for r in runs],
           "left_out": left}
    print(performance_page.section(row), end="")
    if args.json:
        write_text(args.json, json.dumps(row, indent=1) + "\n")
    if args.page:
        try:
            rows = json.loads(PAGE_JSON.read_text(encoding="utf-8"))["rows"] if PAGE_JSON.exists() else []
        except (OSError, ValueError, KeyError) as err:
            raise SuiteError(f"{PAGE_JSON.relative_to(ROOT)}: not a performance page's data ({err})") from None
        rows = performance_page.merged(rows, row)
        write_text(PAGE_JSON, json.dumps({"rows": rows}, indent=1) + "\n")
        write_text(PAGE_MD, performance_page.page(rows))
    return 0
