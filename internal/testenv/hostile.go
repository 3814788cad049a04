package testenv

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// HostileKey is a provider key with characters that JSON and URLs escape,
// so that a test sees every form a text can carry it in.
const HostileKey = "sk-hostile/K3y+with&escapes_0123456789"

// HostileProvider serves an OpenAI-compatible provider, for the test's
// lifetime, that echoes the Authorization header it receives ("Bearer
// KEY") into every place of its answers: each field of an error (message,
// type, code, param), its headers (a request id, x-ratelimit-*, a header
// of its own), a completion's id and content, a stream's data chunks and
// error event, a model list. The request body picks the answer:
//
//   - "say-400": 400 with the key in every field of the error;
//   - "say-500": 500, likewise (retryable);
//   - "say-quota": 429 insufficient_quota with the key in the type and message;
//   - "say-429-once": the first such request gets 429 (retry-after 0),
//     every later one the completion;
//   - "stream-error" in a stream: a data chunk, then an error event;
//   - anything else: a completion (or a stream) carrying the key.
//
// Its base URL ends in /v1.
func HostileProvider(t testing.TB) string {
	var (
		mu   sync.Mutex
		once = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		key := strings.TrimPrefix(auth, "Bearer ")
		js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		for _, h := range []string{"X-Request-Id", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Tokens", "X-Hostile-Echo"} {
			w.Header().Set(h, auth)
		}
		w.Header().Set("X-Hostile-Escaped", url.QueryEscape(key))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%s,"object":"model","owned_by":%s}]}`, js("m-"+key), js(auth))
			return
		}
		data, _ := io.ReadAll(r.Body)
		body := string(data)
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.Unmarshal(data, &req)
		errBody := fmt.Sprintf(`{"error":{"message":%s,"type":%s,"code":%s,"param":%s}}`,
			js("Invalid header: Authorization: "+auth), js(auth), js(key), js(auth))
		first := func(tag string) bool {
			mu.Lock()
			defer mu.Unlock()
			seen := once[tag]
			once[tag] = true
			return !seen
		}
		switch {
		case strings.Contains(body, "say-400"):
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, errBody)
		case strings.Contains(body, "say-500"):
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, errBody)
		case strings.Contains(body, "say-quota"):
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"error":{"message":%s,"type":%s,"code":"insufficient_quota","param":%s}}`,
				js("You exceeded your current quota, key "+key), js(auth), js(auth))
		case strings.Contains(body, "say-429-once") && first(body):
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"error":{"message":%s,"type":%s,"code":%s,"param":%s}}`,
				js("Rate limit reached for "+auth+" on requests per min (RPM): Limit 100, Used 100, Requested 1. Please try again in 1ms."), js(auth), js(key), js(auth))
		case req.Stream:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":%s,\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%s}}]}\n\n", js("c-"+key), js(auth))
			if strings.Contains(body, "stream-error") {
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", errBody)
				return
			}
			fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n")
		default:
			fmt.Fprintf(w, `{"id":%s,"object":"chat.completion","model":"m","system_fingerprint":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
				js("c-"+key), js(url.PathEscape(key)), js("your "+auth))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// KeyForms are the forms a text can carry key in: as sent, after "Bearer ",
// JSON-escaped (with and without "/" escaped) and URL-escaped.
func KeyForms(key string) []string {
	b, _ := json.Marshal(key)
	js := string(b[1 : len(b)-1])
	return []string{key, "Bearer " + key, js, strings.ReplaceAll(js, "/", `\/`), url.QueryEscape(key), url.PathEscape(key)}
}

// AssertNoKey fails t, naming where and the line, if text carries key in any
// of its KeyForms.
func AssertNoKey(t testing.TB, where, text, key string) {
	t.Helper()
	for _, f := range KeyForms(key) {
		if i := strings.Index(text, f); i >= 0 {
			start := strings.LastIndexByte(text[:i], '\n') + 1
			end := len(text)
			if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
				end = i + j
			}
			t.Errorf("%s carries the key (as %q):\n%s", where, f, text[start:end])
			return
		}
	}
}

// DatabaseText returns every value of every row of every table of the
// database at url (a SQLite file path, or a PostgreSQL URL, as Databases
// gives them), one row a line, for a test to search. A value that holds
// base64 (DBOS keeps outputs and errors so) is followed by what it decodes
// to, twice over.
func DatabaseText(t testing.TB, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows []string
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("open %s: %v", dbURL, err)
		}
		defer conn.Close(ctx)
		tables, err := conn.Query(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
			WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(tables, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			r, err := conn.Query(ctx, "SELECT t::text FROM "+name+" t")
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			texts, err := pgx.CollectRows(r, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			for _, s := range texts {
				rows = append(rows, name+": "+s)
			}
		}
	} else {
		db, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite:"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var names []string
		r, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var n string
			if err := r.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			r, err := db.QueryContext(ctx, `SELECT * FROM "`+name+`"`)
			if err != nil {
				t.Fatalf("read %s: %v", name, err)
			}
			cols, _ := r.Columns()
			for r.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := r.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				for i, v := range vals {
					if b2, ok := v.([]byte); ok {
						v = string(b2)
					}
					fmt.Fprintf(&b, " %s=%v", cols[i], v)
				}
				rows = append(rows, name+":"+b.String())
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, row := range rows {
		rows[i] = decoded(decoded(row))
	}
	return strings.Join(rows, "\n")
}

var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{12,}={0,2}`)

// decoded returns s followed by what each base64 run in it decodes to.
func decoded(s string) string {
	var b strings.Builder
	b.WriteString(s)
	for _, run := range base64Run.FindAllString(s, -1) {
		if d, err := base64.StdEncoding.DecodeString(run); err == nil {
			b.WriteString(" ⟨base64: ")
			b.Write(d)
			b.WriteString("⟩")
		} else if d, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(run, "=")); err == nil {
			b.WriteString(" ⟨base64: ")
			b.Write(d)
			b.WriteString("⟩")
		}
	}
	return b.String()
}
