// Package cookbook is OpenAI's cookbook script
// api_request_parallel_processor.py in Go, for tests that drive sluice's
// gateway with it as an outside client would: the script's dependencies
// (aiohttp, tiktoken) are not installed where the tests run, so its logic
// is kept here, faithfully. Only tests import this package.
package cookbook

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tiktoken-go/tokenizer"
)

// Client is the script, kept to its logic: two capacity buckets, available
// requests and available tokens, that start full and refill continuously
// at max_requests_per_minute and max_tokens_per_minute; a request is sent
// when the buckets hold 1 request and its token estimate, which it takes
// from them; requests to retry are served before new ones; a request has
// max_attempts attempts, one taken at each send; any answer whose error
// message contains "Rate limit" stamps the time of the last rate-limit
// error, and the main loop sends nothing until 15 s have passed since it;
// other error answers and exceptions (a timeout, a body that is not JSON)
// are other errors; a failed request goes back to the retry queue while it
// has attempts left, and fails for good after. Every request has aiohttp's
// ClientSession default total timeout of 300 s, and at most 100 are on the
// wire at once (aiohttp's default connection limit).
//
// Every duration is set by the caller, none has a default: the script's
// own are a minute (the buckets' refill period), a 15 s pause after a
// rate-limit error, a 300 s timeout and a 1 ms tick. It reads no
// retry-after header, as the script reads none.
type Client struct {
	URL    string // the chat completions endpoint
	APIKey string // sent as "Authorization: Bearer KEY"

	MaxRequestsPerMinute float64
	MaxTokensPerMinute   float64
	MaxAttempts          int

	Minute  time.Duration // how long a minute of the key lasts in wall time
	Pause   time.Duration // seconds_to_pause_after_rate_limit_error (15 s), in wall time
	Timeout time.Duration // aiohttp's total timeout (300 s), in wall time
	Tick    time.Duration // seconds_to_sleep_each_loop (1 ms), in wall time
}

// Result is what the client recorded of one request.
type Result struct {
	OK       bool
	Attempts int           // sends it took
	Span     time.Duration // from its first send to its last answer, wall time
	Done     time.Duration // from the start of the run to its last answer, wall time
	Errors   []string      // what each failed attempt got, in order
}

// Outcome is the outcome of one run: the script's status tracker, the
// per-request results in file order, and the run's wall time.
type Outcome struct {
	Started, Succeeded, Failed         int
	RateLimitErrors, APIErrors, Others int
	Results                            []Result
	Start                              time.Time // when the run began: Result.Done counts from it
	Wall                               time.Duration
}

// request is the script's APIRequest.
type request struct {
	id           int
	body         []byte
	tokens       int // token_consumption
	attemptsLeft int
	first, last  time.Time
	errs         []string
}

// Codec returns the cl100k_base tokenizer, the script's (tiktoken's)
// encoding for the chat models, which Tokens counts with.
func Codec() tokenizer.Codec { return cl100k() }

var cl100k = sync.OnceValue(func() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.Cl100kBase)
	if err != nil {
		panic(err) // compiled in: cannot fail
	}
	return c
})

// Tokens is the script's num_tokens_consumed_from_request for a chat
// completion: for each message 4 tokens plus the tokens of each of its
// values (one less for a name, as the role is then omitted), 2 for the
// reply's priming, and max_tokens (15 when unset) times n for the answer.
func Tokens(body []byte) int {
	var req struct {
		Messages  []map[string]string `json:"messages"`
		MaxTokens *int                `json:"max_tokens"`
		N         *int                `json:"n"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		panic(err)
	}
	maxTokens, n := 15, 1
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if req.N != nil {
		n = *req.N
	}
	tokens := 0
	for _, m := range req.Messages {
		tokens += 4
		for k, v := range m {
			c, _ := Codec().Count(v)
			tokens += c
			if k == "name" {
				tokens--
			}
		}
	}
	return tokens + 2 + n*maxTokens
}

// Run processes bodies, as the script processes the lines of its requests
// file, and returns when every request has succeeded or failed for good (or
// ctx ends, which the script does not have: it only stops a test gone wrong).
func (c *Client) Run(ctx context.Context, bodies [][]byte) *Outcome {
	hc := &http.Client{
		Timeout: c.Timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			MaxConnsPerHost:     100,
			MaxIdleConnsPerHost: 100,
		},
	}
	defer hc.CloseIdleConnections()

	var (
		mu            sync.Mutex
		retryQueue    []*request
		inProgress    int
		lastRateLimit time.Time
		run           = &Outcome{Results: make([]Result, len(bodies))}
		ended         = make(chan struct{}, 1) // a call ended: the loop looks again at once
		start         = time.Now()
	)
	run.Start = start
	finish := func(r *request, ok bool) {
		run.Results[r.id] = Result{OK: ok, Attempts: c.MaxAttempts - r.attemptsLeft,
			Span: r.last.Sub(r.first), Done: r.last.Sub(start), Errors: r.errs}
		inProgress--
		if ok {
			run.Succeeded++
		} else {
			run.Failed++
		}
	}
	call := func(r *request) {
		kind, msg := c.call(ctx, hc, r.body)
		mu.Lock()
		defer mu.Unlock()
		r.last = time.Now()
		switch kind {
		case callOK:
			finish(r, true)
		default:
			switch kind {
			case callRateLimit:
				lastRateLimit = r.last
				run.RateLimitErrors++
			case callAPIError:
				run.APIErrors++
			default:
				run.Others++
			}
			r.errs = append(r.errs, msg)
			if r.attemptsLeft > 0 {
				retryQueue = append(retryQueue, r)
			} else {
				finish(r, false)
			}
		}
		select {
		case ended <- struct{}{}:
		default:
		}
	}

	requestCapacity, tokenCapacity := c.MaxRequestsPerMinute, c.MaxTokensPerMinute
	lastUpdate := start
	var next *request
	file := 0
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		mu.Lock()
		// The next request, unless one already waits for capacity: a retry
		// first, else a new one from the file.
		if next == nil {
			if len(retryQueue) > 0 {
				next, retryQueue = retryQueue[0], retryQueue[1:]
			} else if file < len(bodies) {
				next = &request{id: file, body: bodies[file], tokens: Tokens(bodies[file]), attemptsLeft: c.MaxAttempts}
				file++
				run.Started++
				inProgress++
			}
		}
		// The buckets refill for the time since the last update.
		now := time.Now()
		elapsed := float64(now.Sub(lastUpdate)) / float64(c.Minute)
		requestCapacity = min(requestCapacity+c.MaxRequestsPerMinute*elapsed, c.MaxRequestsPerMinute)
		tokenCapacity = min(tokenCapacity+c.MaxTokensPerMinute*elapsed, c.MaxTokensPerMinute)
		lastUpdate = now
		if next != nil && requestCapacity >= 1 && tokenCapacity >= float64(next.tokens) {
			requestCapacity--
			tokenCapacity -= float64(next.tokens)
			next.attemptsLeft--
			if next.first.IsZero() {
				next.first = now
			}
			r := next
			wg.Go(func() { call(r) })
			next = nil
		}
		if inProgress == 0 {
			mu.Unlock()
			break
		}
		// The script sleeps 1 ms a turn and looks again; nothing it would
		// see can change before the buckets hold the next request or a call
		// ends, so the loop sleeps until then (at least a tick).
		var wait time.Duration = -1 // nothing to send: until a call ends
		if next == nil && (len(retryQueue) > 0 || file < len(bodies)) {
			wait = 0
		} else if next != nil {
			needR := max(1-requestCapacity, 0) / c.MaxRequestsPerMinute
			needT := max(float64(next.tokens)-tokenCapacity, 0) / c.MaxTokensPerMinute
			wait = time.Duration(max(needR, needT) * float64(c.Minute))
		}
		mu.Unlock()
		if wait >= 0 {
			sleepOrEnded(ctx, max(wait, c.Tick), ended)
		} else {
			select {
			case <-ended:
			case <-ctx.Done():
			}
		}
		// After a rate-limit error, nothing is sent until the pause since it
		// has passed.
		mu.Lock()
		pauseEnd := lastRateLimit.Add(c.Pause)
		mu.Unlock()
		if d := time.Until(pauseEnd); d > 0 {
			sleepOrEnded(ctx, d, nil)
		}
	}
	run.Wall = time.Since(start)
	return run
}

func sleepOrEnded(ctx context.Context, d time.Duration, ended <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ended:
	case <-ctx.Done():
	}
}

type callKind int

const (
	callOK callKind = iota
	callRateLimit
	callAPIError
	callException
)

// call is the script's APIRequest.call_api: the answer's JSON is read
// whatever its status, and it failed when it has an "error".
func (c *Client) call(ctx context.Context, hc *http.Client, body []byte) (callKind, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return callException, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return callException, err.Error()
	}
	defer resp.Body.Close()
	var answer struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	// aiohttp's response.json() refuses a body that is not JSON; the
	// timeout covers reading the body too.
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return callException, "content type " + resp.Header.Get("Content-Type") + ", status " + resp.Status
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return callException, err.Error()
	}
	if answer.Error != nil {
		if strings.Contains(answer.Error.Message, "Rate limit") {
			return callRateLimit, answer.Error.Message
		}
		return callAPIError, answer.Error.Message
	}
	return callOK, ""
}
