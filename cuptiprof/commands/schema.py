"""`cuptiprof schema`: print the DDL of the store (the contract, every column documented)."""
import sys

from cuptiprof.store.schema import schema_sql


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the DuckDB schema (every table and column documented)",
                       description="Print the DuckDB schema of cuptiprof files (the DDL of "
                       "schemas/cuptiprof.sql): every table, view and column documented.")
    p.set_defaults(func=run)


def run(args) -> int:
    sys.stdout.write(schema_sql())
    return 0
