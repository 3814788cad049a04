#!/usr/bin/env python3
"""DevPick's own service, in the shape of the seed's: it keeps articles in
its SQLite file, adds new ones, and reads the English summaries, titles and
analyses that sluice's jobs (sluice.yaml) write back into the same table.
Standard library only.

    python3 devpick.py init                 create the articles table
    python3 devpick.py add N                add N new Japanese articles
    python3 devpick.py show [--json]        what the jobs have done so far
    python3 devpick.py article ID           one article with its outputs
"""

import argparse
import json
import random
import sqlite3
import sys
import time

DB = "devpick.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS articles (
    id             TEXT    PRIMARY KEY,
    seq            INTEGER NOT NULL UNIQUE,
    published_at   INTEGER NOT NULL,
    title_ja       TEXT    NOT NULL,
    summary_ja     TEXT    NOT NULL,
    body_ja        TEXT    NOT NULL,
    analysis       TEXT,
    analysis_at    INTEGER,
    summary_en     TEXT,
    summary_en_at  INTEGER,
    title_en       TEXT,
    title_en_at    INTEGER
)
"""

TECHS = ["Go", "Rust", "TypeScript", "PostgreSQL", "Kubernetes", "SQLite", "Python", "React"]
TOPICS = ["入門", "実践ガイド", "の落とし穴", "で作る", "の新機能", "の性能改善"]
LEADS = ["{t}を本番で使ったチームの経験をまとめた記事です。",
         "{t}の最新版で変わった点を解説します。",
         "{t}と{o}を比べて選び方を整理しました。"]
POINTS = ["設定は最小限から始める", "計測してから最適化する", "失敗した例も共有する",
          "移行は段階的に進める", "監視を先に用意する", "チームで手順を共有する"]
SENTENCES = ["まず全体の構成を確認します。", "次に小さな例で動かしてみます。",
             "本番では負荷に注意が必要です。", "ログを見ると原因がわかりました。",
             "最後に結果を比べました。", "この方法で処理時間が半分になりました。"]


def connect():
    db = sqlite3.connect(DB, timeout=10)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA busy_timeout=10000")
    return db


def article(seq):
    r = random.Random(seq)
    t, o = r.sample(TECHS, 2)
    title = t + r.choice(TOPICS) + "【第%d回】" % r.randint(1, 9)
    summary = r.choice(LEADS).format(t=t, o=o) + "\n要点:\n" + "".join("・" + p + "\n" for p in r.sample(POINTS, 3))
    body = "\n\n".join("".join(r.sample(SENTENCES, 4)) for _ in range(3))
    return ("a%09d" % seq, seq, int(time.time() * 1000), title, summary.strip(), body)


def cmd_init(_):
    with connect() as db:
        db.execute(SCHEMA)
    print("created %s: table articles" % DB)


def cmd_add(args):
    with connect() as db:
        db.execute(SCHEMA)
        last = db.execute("SELECT COALESCE(MAX(seq), 0) FROM articles").fetchone()[0]
        rows = [article(seq) for seq in range(last + 1, last + 1 + args.n)]
        db.executemany("INSERT INTO articles (id, seq, published_at, title_ja, summary_ja, body_ja) "
                       "VALUES (?, ?, ?, ?, ?, ?)", rows)
    print("added %d articles (%s to %s)" % (args.n, rows[0][0], rows[-1][0]) if rows else "added none")


def counts(db):
    out = {}
    total = db.execute("SELECT COUNT(*) FROM articles").fetchone()[0]
    for job, col in (("analysis", "analysis"), ("summary", "summary_en"), ("title", "title_en")):
        done = db.execute("SELECT COUNT(*) FROM articles WHERE %s IS NOT NULL" % col).fetchone()[0]
        out[job] = {"done": done, "total": total}
    # A title is saved only once its article's summary is: never before.
    out["titles_before_summaries"] = db.execute(
        "SELECT COUNT(*) FROM articles WHERE title_en IS NOT NULL AND "
        "(summary_en IS NULL OR title_en_at < summary_en_at)").fetchone()[0]
    return out


def cmd_show(args):
    with connect() as db:
        c = counts(db)
        if args.json:
            json.dump(c, sys.stdout)
            print()
            return
        for job in ("analysis", "summary", "title"):
            print("%-9s %5d of %d" % (job, c[job]["done"], c[job]["total"]))
        for row in db.execute("SELECT id, title_ja, title_en FROM articles WHERE title_en IS NOT NULL "
                              "ORDER BY title_en_at DESC LIMIT 3"):
            print("  %s  %s\n             -> %s" % row)


def cmd_article(args):
    with connect() as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM articles WHERE id = ?", (args.id,)).fetchone()
        if row is None:
            sys.exit("no article %s" % args.id)
        json.dump(dict(row), sys.stdout, ensure_ascii=False, indent=2)
        print()


def main():
    global DB
    p = argparse.ArgumentParser(description="DevPick's articles, for sluice's YAML jobs")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("init").set_defaults(fn=cmd_init)
    a = sub.add_parser("add")
    a.add_argument("n", type=int)
    a.set_defaults(fn=cmd_add)
    s = sub.add_parser("show")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_show)
    r = sub.add_parser("article")
    r.add_argument("id")
    r.set_defaults(fn=cmd_article)
    p.add_argument("--db", default=DB, help="the SQLite file (default devpick.db)")
    args = p.parse_args()
    DB = args.db
    args.fn(args)


if __name__ == "__main__":
    main()
