"""``python -m harness.merge <run folder> [--shards N]``: merge a sharded run's finished shards (``shard=i/n``)
into the run folder (``harness.shards``). A run's last shard does this itself; this is for shards that ran
elsewhere or a merge to redo. Prints the merged summary; a missing shard or shards of different configurations
end it with one ``error: ...`` line and exit status 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.records import RunFolderMismatch
from harness.runner import format_summary
from harness.shards import SHARDS, ShardsIncomplete, merge


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.merge", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the run folder (or one of its shard folders)")
    p.add_argument("--shards", type=int, default=None, help="the shard count to merge (when several were run)")
    args = p.parse_args(argv)
    folder = args.folder.parent.parent if args.folder.parent.name == SHARDS else args.folder
    try:
        summary = merge(folder, args.shards)
    except (ShardsIncomplete, RunFolderMismatch) as e:
        print("error: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 2
    print(format_summary(summary))
    print(f"records: {folder} (merged {summary['shards']['count']} shards)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
