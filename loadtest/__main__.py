"""Command line: ``python -m loadtest verify ...`` and ``python -m loadtest run ...``."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from common import cli
from common.intervals import interval_seconds
from common.lake_settings import LakeSettings
from common.settings import add_settings_arguments, load_settings
from loadtest.lake import LakeReadError, named_files, read_lake, read_truth
from loadtest.report import verify_markdown
from loadtest.senders import read_reports, senders, senders_lines
from loadtest.settings import LoadtestSettings
from loadtest.verify import VerifyConfig, verify


def _verify(args: argparse.Namespace) -> int:
    try:
        watermark_s = interval_seconds(args.watermark)
    except ValueError as exc:
        return cli.error(f"--watermark: {exc}", cli.BAD_INPUT)
    latency_from = None
    if args.latency_from:
        try:
            latency_from = datetime.fromisoformat(args.latency_from)
        except ValueError:
            latency_from = None
        if latency_from is None or latency_from.tzinfo is None:
            return cli.error(
                f"--latency-from: {args.latency_from!r} is not an ISO-8601 time with a "
                "zone, e.g. 2026-03-01T12:00:00Z",
                cli.BAD_INPUT,
            )
    try:
        manifests = named_files(args.manifest, "manifest")  # the named files, checked first
    except LakeReadError as exc:
        return cli.error(str(exc), cli.BAD_INPUT)
    try:
        lake_settings = load_settings(
            LakeSettings, **({"root": args.lake_root} if args.lake_root else {})
        )
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    root = lake_settings.root
    lake_dir = cli.local_path(root)
    if lake_dir is not None and not lake_dir.is_dir():
        what = "is a file" if lake_dir.exists() else "does not exist"
        return cli.error(
            f"the lake root {lake_dir} {what}: pass --lake-root the folder the processor "
            "writes (its IOT_LAKE_ROOT)",
            cli.BAD_INPUT,
        )
    try:
        sent_by = senders(read_reports(named_files(args.reports, "report", "*.json")))
    except LakeReadError as exc:
        return cli.error(str(exc), cli.BAD_INPUT)
    out = Path(args.out) if args.out else None
    if out is not None:
        try:  # before the checks, which may take minutes: their results must land
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return cli.error(
                f"--out: cannot write the results to {out} ({exc.strerror or type(exc).__name__})",
                cli.BAD_INPUT,
            )
    try:
        truth = read_truth(manifests)
        lake = read_lake(root, lake_settings.storage_options())
    except LakeReadError as exc:
        return cli.error(str(exc), cli.BAD_INPUT)
    result = verify(truth, lake, VerifyConfig(watermark_s, args.slack_s, args.strict, latency_from))
    print(result.summary())
    if sent_by is not None:
        print("\nsenders:\n" + "\n".join(senders_lines(sent_by)))
    if out is not None:
        document = result.to_dict() | ({"senders": sent_by} if sent_by is not None else {})
        (out / "verify.json").write_text(json.dumps(document, indent=2, default=str))
        (out / "verify.md").write_text(verify_markdown(result, sent_by))
        print(f"written: {out / 'verify.json'}, {out / 'verify.md'}")
    return 0 if result.ok else 1


def _run(args: argparse.Namespace) -> int:
    from loadtest.run import LoadtestError, run_loadtest

    try:
        settings = load_settings(LoadtestSettings, args)
    except (ValueError, FileNotFoundError) as exc:
        return cli.settings_error(exc)
    try:
        outcome = run_loadtest(settings)
    except LoadtestError as exc:
        return cli.error(str(exc))
    print(outcome.summary)
    print(f"report: {outcome.out_dir / 'report.md'}")
    return 0 if outcome.passed else 1


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run ``verify`` or a load test.

    Returns:
        0 when verify or the load test passed; 1 when it failed (loss, duplicates, a
        criterion missed, or a part of the pipeline did not run); 2 on bad input.
    """
    parser = cli.ArgumentParser(
        prog="python -m loadtest", description="Verify the Delta tables; load-test the pipeline."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "verify",
        help="check the Delta tables against a producer manifest",
        description="Check the Delta tables against the producer's manifest. Exit 0: nothing "
        "lost or duplicated; 1: something was; 2: the inputs could not be read.",
    )
    v.add_argument(
        "--manifest",
        required=True,
        nargs="+",
        help="the producer's manifest (JSON lines); for a run sent in shards, each shard's: "
        "files, a folder of them (*.jsonl) or a glob",
    )
    v.add_argument(
        "--lake-root",
        help="the lake (default IOT_LAKE_ROOT, else <state dir>/lake); an S3 lake is reached with "
        "the processor's IOT_LAKE_S3_* settings",
    )
    v.add_argument(
        "--watermark", default="2 minutes", help="the processor's watermark (default 2 minutes)"
    )
    v.add_argument(
        "--slack-s",
        type=cli.at_least(0),
        default=None,
        help="lateness beyond the watermark where drop and keep are both right "
        "(default: from the silver batch intervals, at least 30 s)",
    )
    v.add_argument(
        "--strict", action="store_true", help="also fail on quarantine or sequence mismatches"
    )
    v.add_argument(
        "--latency-from",
        help="measure latency only for readings created at or after this ISO-8601 time "
        "(e.g. the end of a warm-up); loss and duplicates still cover every reading",
    )
    v.add_argument(
        "--reports",
        nargs="+",
        default=[],
        help="the producers' reports (--report-path), one per shard: files, a folder of them "
        "(*.json) or a glob; adds each sender's rate and latency, and their total",
    )
    v.add_argument("--out", help="folder for verify.json and verify.md")
    r = sub.add_parser(
        "run",
        help="run a load test and verify it",
        description="Run a rate profile through producer, broker and processor, then verify "
        "and write the report. Exit 0 when every criterion passed.",
    )
    r.add_argument("--config", help="TOML settings file ([loadtest] and [kafka] tables)")
    add_settings_arguments(r, LoadtestSettings)
    args = parser.parse_args(argv)
    return _verify(args) if args.command == "verify" else _run(args)


if __name__ == "__main__":
    cli.run(main, "loadtest")
