package devpick

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Table is the app's table of articles. Both pipelines work on its rows:
// sluice's writes analysis, summary_en and title_en; the seed's own
// scheduler (Naive) writes the same columns suffixed _naive, so the two run
// side by side on one set of articles without seeing each other's output.
const Table = "articles"

// schema creates Table. Times are Unix milliseconds. Each output column has
// its time and a count of the saves that wrote it (*_saves), which is how a
// test sees that no item was saved twice.
var schema = []string{`CREATE TABLE IF NOT EXISTS ` + Table + ` (
    id                  TEXT    PRIMARY KEY,
    seq                 BIGINT  NOT NULL UNIQUE,
    published_at        BIGINT  NOT NULL,
    title_ja            TEXT    NOT NULL,
    summary_ja          TEXT    NOT NULL,
    body_ja             TEXT    NOT NULL,
    analysis            TEXT,
    analysis_at         BIGINT,
    analysis_saves      BIGINT  NOT NULL DEFAULT 0,
    summary_en          TEXT,
    summary_en_at       BIGINT,
    summary_en_saves    BIGINT  NOT NULL DEFAULT 0,
    title_en            TEXT,
    title_en_at         BIGINT,
    title_en_saves      BIGINT  NOT NULL DEFAULT 0,
    analysis_naive       TEXT,
    analysis_naive_at    BIGINT,
    analysis_naive_saves BIGINT NOT NULL DEFAULT 0,
    summary_en_naive       TEXT,
    summary_en_naive_at    BIGINT,
    summary_en_naive_saves BIGINT NOT NULL DEFAULT 0,
    title_en_naive       TEXT,
    title_en_naive_at    BIGINT,
    title_en_naive_saves BIGINT NOT NULL DEFAULT 0
)`,
	`CREATE INDEX IF NOT EXISTS ` + Table + `_published ON ` + Table + ` (published_at)`,
}

// CreateSchema creates Table if it is missing. Seed, Arrive and Register
// call it; it is safe to call any number of times.
func CreateSchema(ctx context.Context, db *sql.DB) error {
	for _, q := range schema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("devpick: create table %s: %w", Table, err)
		}
	}
	return nil
}

// OpenDB opens the SQLite file a sluice app's DatabaseURL names ("sqlite:PATH"
// or a path) the way sluice opens it — WAL journal, a 5 s busy timeout,
// transactions that take the write lock up front — so that this handle and
// the app's share the file without failing on each other's locks. The
// articles must live in the app's own database: the backfills list pending
// articles and save outputs in the app's transactions. PostgreSQL is not
// supported by this example.
func OpenDB(databaseURL string) (*sql.DB, error) {
	path := databaseURL
	if rest, ok := strings.CutPrefix(path, "sqlite:"); ok {
		path = rest
	}
	if strings.HasPrefix(path, "postgres://") || strings.HasPrefix(path, "postgresql://") {
		return nil, errors.New("devpick: the example keeps its articles in SQLite; PostgreSQL is not supported")
	}
	if path == "" {
		return nil, errors.New("devpick: no database path")
	}
	params := []string{"_pragma=busy_timeout(5000)", "_pragma=journal_mode(WAL)", "_pragma=synchronous(NORMAL)", "_pragma=foreign_keys(ON)", "_txlock=immediate"}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	db, err := sql.Open("sqlite", path+sep+strings.Join(params, "&"))
	if err != nil {
		return nil, fmt.Errorf("devpick: open %s: %w", path, err)
	}
	return db, nil
}

// Article is one article of the Japanese site.
type Article struct {
	ID          string    `json:"id"`
	Seq         int64     `json:"seq"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	TitleJA     string    `json:"title_ja,omitempty"`
	// SummaryJA is the Japanese summary and key points shown on the
	// Japanese page: what the English summary translates.
	SummaryJA string `json:"summary_ja,omitempty"`
	BodyJA    string `json:"body_ja,omitempty"`
}

// ArticleSeed seeds the generator: the same seed and sequence number give
// the same article.
const ArticleSeed = 20261017

// Epoch is when the generated history starts: article seq is published
// seq × 864 s (100 a day, the seed's rate of new articles) after it.
var Epoch = time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)

// ArticleID is the key of article seq: fixed width, so that the keys'
// string order is their numeric order, as a backfill's keys must be.
func ArticleID(seq int64) string { return fmt.Sprintf("a%09d", seq) }

// Generate returns article seq (from 1), built from fixed lists of Japanese
// phrases with a generator seeded by ArticleSeed and seq. Its title is
// about 40 tokens, its Japanese summary about 300 and its body about 600,
// the sizes of DevPick's cost estimate. PublishedAt is zero: Seed and
// Arrive set it.
func Generate(seq int64) Article {
	r := rand.New(rand.NewPCG(ArticleSeed, uint64(seq)))
	pick := func(list []string) string { return list[r.IntN(len(list))] }
	tech := pick(techs)
	other := pick(techs)
	for other == tech {
		other = pick(techs)
	}
	fill := func(s string) string {
		return strings.NewReplacer("{tech}", tech, "{other}", other, "{team}", pick(teams), "{n}", fmt.Sprint(2+r.IntN(8))).Replace(s)
	}
	title := tech + pick(titleTopics) + fill(pick(titleSubs)) + pick(titleSuffixes)

	var sum strings.Builder
	sum.WriteString(fill(pick(summaryLeads)))
	sum.WriteString("\n要点:\n")
	for _, i := range r.Perm(len(points))[:5] {
		sum.WriteString("・" + fill(points[i]) + "\n")
	}
	sum.WriteString(fill(pick(summaryCloses)))

	var body strings.Builder
	for p := range 3 {
		if p > 0 {
			body.WriteString("\n\n")
		}
		for _, i := range r.Perm(len(sentences))[:5] {
			body.WriteString(fill(sentences[i]))
		}
	}
	return Article{ID: ArticleID(seq), Seq: seq, TitleJA: title, SummaryJA: strings.TrimSpace(sum.String()), BodyJA: body.String()}
}

// seededAnalysis is the analysis a historical article already has: the
// seed's backlog of analysis is only the new articles.
func seededAnalysis(a Article) string {
	return "分析済み（取り込み時）: " + a.TitleJA
}

const insertArticle = `INSERT INTO ` + Table + ` (id, seq, published_at, title_ja, summary_ja, body_ja,
    analysis, analysis_at, analysis_naive, analysis_naive_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7, $8)
ON CONFLICT (id) DO NOTHING`

// Seed inserts articles 1 to n (Generate), published before the site's
// English backfill began and already analysed, for both pipelines: what is
// left is their English summaries and titles. It inserts only the articles
// missing, so running it again inserts nothing; it returns how many it
// inserted.
func Seed(ctx context.Context, db *sql.DB, n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("devpick: seed %d articles: negative", n)
	}
	if err := CreateSchema(ctx, db); err != nil {
		return 0, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("devpick: seed: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, insertArticle)
	if err != nil {
		return 0, fmt.Errorf("devpick: seed: %w", err)
	}
	defer stmt.Close()
	inserted := 0
	for seq := int64(1); seq <= int64(n); seq++ {
		a := Generate(seq)
		at := Epoch.Add(time.Duration(seq) * 864 * time.Second).UnixMilli()
		res, err := stmt.ExecContext(ctx, a.ID, a.Seq, at, a.TitleJA, a.SummaryJA, a.BodyJA, seededAnalysis(a), at)
		if err != nil {
			return 0, fmt.Errorf("devpick: seed article %d: %w", seq, err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("devpick: seed article %d: %w", seq, err)
		}
		inserted += int(k)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("devpick: seed: %w", err)
	}
	return inserted, nil
}

// SeedSummaries gives articles 1 to n an English summary for both
// pipelines, where they have none, as the summaries DevPick's backfill had
// saved before its title backfill began (the seed's 1,412 articles with an
// English summary and a Japanese title): their titles are eligible at once.
// It returns how many articles it gave a summary; running it again gives
// none. The summaries count as no save of either pipeline (*_saves stay 0).
func SeedSummaries(ctx context.Context, db *sql.DB, n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("devpick: seed %d summaries: negative", n)
	}
	var total int64
	for _, c := range []string{"summary_en", "summary_en_naive"} {
		res, err := db.ExecContext(ctx, `UPDATE `+Table+` SET `+c+` = 'An English summary saved before the title backfill began (article ' || id || ').', `+
			c+`_at = published_at WHERE seq <= $1 AND `+c+` IS NULL`, n)
		if err != nil {
			return 0, fmt.Errorf("devpick: seed summaries: %w", err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("devpick: seed summaries: %w", err)
		}
		total = max(total, k)
	}
	return int(total), nil
}

// Arrive inserts the next new article (the one after the highest sequence
// number), published at now and not yet analysed by either pipeline, and
// returns it. Call it on a timer to model the site's new articles (the seed
// has about 100 a day).
func Arrive(ctx context.Context, db *sql.DB, now time.Time) (Article, error) {
	if err := CreateSchema(ctx, db); err != nil {
		return Article{}, err
	}
	tx, err := db.BeginTx(ctx, nil) // takes the write lock up front (OpenDB): no two arrivals get one number
	if err != nil {
		return Article{}, fmt.Errorf("devpick: arrive: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM `+Table).Scan(&last); err != nil {
		return Article{}, fmt.Errorf("devpick: arrive: %w", err)
	}
	a := Generate(last + 1)
	a.PublishedAt = now.UTC().Truncate(time.Millisecond)
	_, err = tx.ExecContext(ctx, `INSERT INTO `+Table+` (id, seq, published_at, title_ja, summary_ja, body_ja) VALUES ($1, $2, $3, $4, $5, $6)`,
		a.ID, a.Seq, a.PublishedAt.UnixMilli(), a.TitleJA, a.SummaryJA, a.BodyJA)
	if err != nil {
		return Article{}, fmt.Errorf("devpick: arrive: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Article{}, fmt.Errorf("devpick: arrive: %w", err)
	}
	return a, nil
}

// Pipeline names one of the two pipelines that write to Table.
type Pipeline string

// The pipelines: sluice's (Register) and the seed's own scheduler (Naive).
const (
	SluicePipeline Pipeline = "sluice"
	NaivePipeline  Pipeline = "naive"
)

func (p Pipeline) suffix() (string, error) {
	switch p {
	case SluicePipeline:
		return "", nil
	case NaivePipeline:
		return "_naive", nil
	}
	return "", fmt.Errorf("devpick: unknown pipeline %q", p)
}

// Counts is one job's progress, read from Table.
type Counts struct {
	// Done is how many articles have the job's output (for analysis, the
	// historical articles Seed inserted analysed count as done).
	Done int `json:"done"`
	// Remaining is how many are eligible and still need it.
	Remaining int `json:"remaining"`
	// Waiting is how many need it but are not eligible yet: titles of
	// articles without an English summary.
	Waiting int `json:"waiting,omitempty"`
}

// Progress returns each job's counts (by job name: Analysis, Summary,
// Title) for pipeline p.
func Progress(ctx context.Context, db *sql.DB, p Pipeline) (map[string]Counts, error) {
	s, err := p.suffix()
	if err != nil {
		return nil, err
	}
	q := `SELECT
    COALESCE(SUM(CASE WHEN analysis` + s + ` IS NOT NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN analysis` + s + ` IS NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN summary_en` + s + ` IS NOT NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN summary_en` + s + ` IS NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN title_en` + s + ` IS NOT NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN title_en` + s + ` IS NULL AND summary_en` + s + ` IS NOT NULL THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN title_en` + s + ` IS NULL AND summary_en` + s + ` IS NULL THEN 1 ELSE 0 END), 0)
FROM ` + Table
	var c [7]int
	if err := db.QueryRowContext(ctx, q).Scan(&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]); err != nil {
		return nil, fmt.Errorf("devpick: progress: %w", err)
	}
	return map[string]Counts{
		Analysis: {Done: c[0], Remaining: c[1]},
		Summary:  {Done: c[2], Remaining: c[3]},
		Title:    {Done: c[4], Remaining: c[5], Waiting: c[6]},
	}, nil
}

// loadArticles reads the articles keys names; the body only withBody (the
// analysis alone reads it), so a backfill's records stay small.
func loadArticles(ctx context.Context, db *sql.DB, keys []string, withBody bool) (map[string]Article, error) {
	out := make(map[string]Article, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	ph := make([]string, len(keys))
	args := make([]any, len(keys))
	for i, k := range keys {
		ph[i] = fmt.Sprintf("$%d", i+1)
		args[i] = k
	}
	body := "''"
	if withBody {
		body = "body_ja"
	}
	rows, err := db.QueryContext(ctx, `SELECT id, seq, published_at, title_ja, summary_ja, `+body+` FROM `+Table+
		` WHERE id IN (`+strings.Join(ph, ", ")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("devpick: load articles: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a Article
		var at int64
		if err := rows.Scan(&a.ID, &a.Seq, &at, &a.TitleJA, &a.SummaryJA, &a.BodyJA); err != nil {
			return nil, fmt.Errorf("devpick: load articles: %w", err)
		}
		a.PublishedAt = time.UnixMilli(at).UTC()
		out[a.ID] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("devpick: load articles: %w", err)
	}
	return out, nil
}

// The phrases articles are made of.
var (
	techs = []string{"Go 1.26", "Rust", "TypeScript", "Kubernetes", "PostgreSQL 18", "SQLite", "React 20", "Next.js",
		"Python 3.14", "Terraform", "GitHub Actions", "Docker", "WebAssembly", "Deno", "Bun", "Zig", "Swift", "Kotlin",
		"AWS Lambda", "Cloudflare Workers", "gRPC", "GraphQL", "Redis", "OpenTelemetry", "Flutter", "Elixir"}
	titleTopics = []string{"の新機能まとめ", "で作るバックエンド入門", "を本番導入して分かったこと", "のパフォーマンス改善事例",
		"のセキュリティ対策ガイド", "への移行で踏んだ落とし穴", "のテスト戦略を見直した話", "で障害対応を自動化する",
		"の設計パターン再入門", "のコストを半分にした方法", "とレート制限の付き合い方", "の監視を一から作り直す",
		"で社内ツールを作り直した記録", "のメモリ使用量を調べる"}
	titleSubs     = []string{"：{team}の事例", "　導入から半年の振り返り", "で学んだ{n}つの教訓", "　{other}との比較も", "：{n}か月の運用記録", "　つまずいた点と解決策"}
	titleSuffixes = []string{"", "【2026年版】", "（前編）", "（後編）", " 実践編", " 完全ガイド", "：現場の知見"}
	teams         = []string{"決済チーム", "検索チーム", "SREチーム", "モバイルチーム", "データ基盤チーム", "少人数のスタートアップ", "個人開発者"}
	summaryLeads  = []string{
		"{team}が{tech}を使ったサービス運用で得た知見を、導入の経緯から本番での結果までまとめた記事です。",
		"{tech}の最新版で追加された機能と、既存のプロジェクトを移行するときの注意点を解説しています。",
		"{tech}と{other}を組み合わせた構成について、設計の判断と運用して分かった課題を紹介する記事です。",
		"{team}が{tech}の性能問題を調査し、計測と改善を繰り返して解決するまでの過程を記録しています。",
	}
	points = []string{
		"導入前に小さな検証環境を作り、{n}週間かけて本番と同じ負荷で試した",
		"設定の既定値のままではタイムアウトが短すぎ、深夜のバッチ処理が失敗していた",
		"{other}との連携部分で再試行が重なり、外部APIのレート制限に当たっていた",
		"監視は残りの件数ではなく、処理が進んでいるかどうかを基準に見直した",
		"ログに処理ごとの結果を残すことで、障害の原因を特定する時間が大きく減った",
		"移行は一度に行わず、{n}段階に分けて古い仕組みと並行して動かした",
		"チーム内で手順書を共有し、誰でも同じ手順で復旧できるようにした",
		"コストは月額で約{n}割下がったが、運用の手間は少し増えた",
		"テストを先に整えたことで、大きな変更でも安心して進められた",
		"無料枠の上限を超えないよう、呼び出しの回数と量を事前に見積もった",
	}
	summaryCloses = []string{
		"同じ規模のサービスを運用している開発者にとって、判断の材料になる内容です。",
		"これから{tech}を試す人にも、すでに使っている人にも参考になる具体的な記録です。",
		"筆者は今後、{other}との比較や長期運用の結果も公開する予定だと述べています。",
	}
	sentences = []string{
		"{tech}は、ここ数年で多くの開発現場に広がりました。",
		"{team}では、以前から{other}を中心にした構成でサービスを運用していました。",
		"しかし利用者が増えるにつれて、応答時間のばらつきが目立つようになりました。",
		"そこでまず、どの処理に時間がかかっているのかを計測することから始めました。",
		"計測の結果、データベースへの問い合わせが全体の半分以上を占めていることが分かりました。",
		"問い合わせをまとめて送るように変えただけで、待ち時間は大きく減りました。",
		"一方で、夜間に動くバッチ処理では別の問題が見つかりました。",
		"外部のAPIを続けて呼び出すと、数分おきにレート制限のエラーが返ってきたのです。",
		"エラーを受けたら一定時間待つ仕組みを入れましたが、それだけでは解決しませんでした。",
		"複数の処理が同じ待ち時間を共有していたため、後ろの処理がいつまでも動けなかったからです。",
		"最終的には、処理ごとに使える量を決めて、順番ではなく量で分け合う形に改めました。",
		"この変更のあと、{n}日間にわたって停止は一度も起きていません。",
		"移行の途中では、古い仕組みと新しい仕組みを並行して動かし、結果を比べました。",
		"結果が一致しない場合は、その都度ログを確かめて原因を探しました。",
		"テストの自動化にも力を入れ、変更のたびに全体の動作を確認できるようにしました。",
		"運用の手順は文書にまとめ、チームの誰でも同じように対応できるようにしています。",
		"費用の面では、無料枠の範囲に収まるよう、呼び出しの量を事前に見積もりました。",
		"見積もりには、1日あたりの上限だけでなく、1分あたりの上限も含める必要がありました。",
		"今後は{other}との比較も進め、より良い構成を探していく予定です。",
		"同じような課題を抱えている方の参考になれば幸いです。",
	}
)
