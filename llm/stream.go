package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/governor"
)

// ChatChunk is one event of a streamed completion.
type ChatChunk struct {
	ID      string        `json:"id"`
	Model   string        `json:"model"`
	Created int64         `json:"created"`
	Choices []ChunkChoice `json:"choices"`
	// Usage is set on the final chunk when usage was asked for
	// (ChatStream always asks); nil on a chunk whose usage has a count
	// that is not a whole number from 0 to 2^63−1 (see Config.Logger),
	// which CarriesUsage still reports.
	Usage *Usage `json:"usage"`
	// Raw is the event's data as received (but for the key, see
	// Scrubber), for forwarding unchanged.
	Raw json.RawMessage `json:"-"`

	carriesUsage bool
}

// CarriesUsage reports whether the chunk came with a usage object, read
// or not: the final chunk of a stream that asked for usage, which a proxy
// drops when its own caller did not ask for it.
func (c *ChatChunk) CarriesUsage() bool { return c.carriesUsage }

// ChunkChoice is the part of one choice a chunk carries.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Message `json:"delta"`
	FinishReason string  `json:"finish_reason"`
}

// Text returns the first choice's new content, or "".
func (c *ChatChunk) Text() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Delta.Content
}

// Stream reads a streamed completion. Use it like bufio.Scanner:
//
//	for s.Next() {
//		fmt.Print(s.Chunk().Text())
//	}
//	if err := s.Err(); err != nil { ... }
//
// Header and Snapshot are available at once, before the first Next. The
// key, should the provider echo it, is scrubbed from the header and from
// every event before it is read (see Scrubber); an error event's text is
// also cleaned and bounded, as every error's is. A
// Stream is not safe for concurrent use, except Close, which may be called
// from another goroutine to abandon it.
type Stream struct {
	client   *Client
	ctx      context.Context
	body     io.ReadCloser
	r        *bufio.Reader
	header   http.Header
	snapshot governor.Snapshot

	rd       reading // the event being read, on the client's read bound
	chunk    *ChatChunk
	usage    *Usage
	err      error
	ended    bool // [DONE], an error, or Close
	finished bool // a finish_reason or usage was seen: EOF after it is a clean end

	closeOnce sync.Once
	closed    atomic.Bool
}

// ChatStream sends a request as a stream (stream: true, with
// stream_options.include_usage so the final chunk reports usage) and
// returns once the response headers have arrived. An error status is
// returned as a classified error, like Chat's. The stream is read within
// the call's Total deadline (see Timeouts), counted from the call's start;
// closing it, or reading it to its end, releases the call.
func (c *Client) ChatStream(ctx context.Context, req *ChatRequest) (*Stream, error) {
	r, err := c.ApplyDefaults(req)
	if err != nil {
		return nil, err
	}
	r = r.clone()
	r.Stream = true
	if r.Extra == nil {
		r.Extra = make(map[string]any, 1)
	}
	r.Extra["stream_options"] = withIncludeUsage(r.Extra["stream_options"])

	resp, err := c.post(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, rerr := c.readBody(resp)
		if rerr != nil {
			return nil, c.transportError(ctx, rerr)
		}
		return nil, c.classify(resp.StatusCode, resp.Header, body)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// The server answered with a plain body: an error object, or it
		// ignored "stream". Neither is a stream.
		defer resp.Body.Close()
		body, rerr := c.readBody(resp)
		if rerr != nil {
			return nil, c.transportError(ctx, rerr)
		}
		if eb := parseErrorBody(c.scrub.Bytes(body)); eb.Message != "" {
			return nil, c.scrub.Error(c.cfg.Profile.classifyBody(0, resp.Header, eb, c.cfg.Now()))
		}
		return nil, &TransportError{Kind: Malformed, Err: errors.New("expected an event stream, got a JSON body")}
	}
	return &Stream{
		client:   c,
		ctx:      ctx,
		body:     resp.Body,
		r:        bufio.NewReaderSize(resp.Body, 16<<10),
		header:   resp.Header,
		snapshot: c.cfg.Profile.Snapshot(resp.Header, c.cfg.Now()),
	}, nil
}

// withIncludeUsage returns stream_options with include_usage set to true,
// keeping any other option the caller gave.
func withIncludeUsage(v any) any {
	opts := map[string]any{}
	switch o := v.(type) {
	case map[string]any:
		for k, x := range o {
			opts[k] = x
		}
	case json.RawMessage:
		// Not an object: replaced. A JSON null decodes into a nil map,
		// which could not be written to.
		if json.Unmarshal(o, &opts) != nil || opts == nil {
			opts = map[string]any{}
		}
	}
	opts["include_usage"] = true
	return opts
}

// Header returns the response header.
func (s *Stream) Header() http.Header { return s.header }

// Snapshot returns the limits the response headers reported.
func (s *Stream) Snapshot() governor.Snapshot { return s.snapshot }

// Chunk returns the chunk the last successful Next read.
func (s *Stream) Chunk() *ChatChunk { return s.chunk }

// Usage returns the usage the final chunk reported, or nil before it
// arrived (or if the provider sent none).
func (s *Stream) Usage() *Usage { return s.usage }

// Err returns the error that ended the stream, or nil if it ended with
// [DONE] (or was closed). A provider's error event is classified like an
// error response; broken JSON is a *TransportError of kind Malformed, and
// a connection that ends mid-stream one of kind Reset.
func (s *Stream) Err() error { return s.err }

// Close releases the connection. It is safe to call more than once and
// while another goroutine is in Next.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.closeOnce.Do(func() { s.body.Close() })
	return nil
}

// Next reads the next chunk and reports whether there is one.
func (s *Stream) Next() bool {
	if s.ended {
		return false
	}
	for {
		s.rd.c = s.client
		name, data, err := s.readEvent()
		// Read: the event is the caller's now, as a plain answer is once
		// read.
		s.rd.release()
		if err != nil {
			if s.closed.Load() || (err == io.EOF && s.finished) {
				return s.end(nil)
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			var te *TransportError
			if errors.As(err, &te) {
				return s.end(err)
			}
			return s.end(s.client.transportError(s.ctx, fmt.Errorf("read stream: %w", err)))
		}
		data = s.client.scrub.Bytes(bytes.TrimSpace(data))
		if len(data) == 0 {
			continue // comments, keep-alives, events without data
		}
		if string(data) == "[DONE]" {
			return s.end(nil)
		}
		// The usage is read apart (readUsage): an odd count in it must
		// not fail a stream the provider gave.
		var c struct {
			ChatChunk
			Usage json.RawMessage `json:"usage"`
			Error json.RawMessage `json:"error"`
			XGroq *struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"x_groq"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			if name == "error" {
				return s.end(s.streamError(parseErrorBody(data)))
			}
			return s.end(&TransportError{Kind: Malformed, Err: fmt.Errorf("stream event: %w", err)})
		}
		if name == "error" || (len(c.Error) > 0 && !isNull(c.Error)) {
			return s.end(s.streamError(parseErrorBody(data)))
		}
		chunk := c.ChatChunk
		chunk.Raw = data
		chunk.ID, chunk.Model = s.client.scrub.Text(chunk.ID, MaxFieldBytes), s.client.scrub.Text(chunk.Model, MaxFieldBytes)
		usage := c.Usage
		if noValue(usage) && c.XGroq != nil {
			// Groq has reported the final usage inside its own x_groq object.
			usage = c.XGroq.Usage
		}
		if !noValue(usage) {
			chunk.carriesUsage = true
			chunk.Usage = s.client.usage(usage)
			s.finished = true
		}
		if chunk.Usage != nil {
			u := *chunk.Usage
			s.usage = &u
		}
		for _, ch := range chunk.Choices {
			if ch.FinishReason != "" {
				s.finished = true
			}
		}
		s.chunk = &chunk
		return true
	}
}

// noValue reports whether a field was absent or null.
func noValue(raw json.RawMessage) bool { return len(raw) == 0 || isNull(raw) }

func (s *Stream) streamError(eb errorBody) error {
	return s.client.scrub.Error(s.client.cfg.Profile.classifyBody(0, s.header, eb, s.client.cfg.Now()))
}

func (s *Stream) end(err error) bool {
	s.ended = true
	s.err = err
	s.Close()
	return false
}

// maxEvent bounds one event's data, so a stream that never sends a line
// break cannot take all memory.
const maxEvent = 8 << 20

var newline = []byte{'\n'}

// readEvent reads one server-sent event: its name and its data lines
// joined with "\n". Comment lines (":") and fields other than event and
// data are skipped. At the end of the body it returns a last event that
// lacked its blank line, then io.EOF.
func (s *Stream) readEvent() (name string, data []byte, err error) {
	var sawData bool
	for {
		line, err := s.readLine(cap(data))
		if err != nil {
			if err == io.EOF && sawData {
				return name, data, nil
			}
			return "", nil, err
		}
		if len(line) == 0 {
			if sawData || name != "" {
				return name, data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if sawData {
				if data, err = s.rd.grow(data, newline, cap(line)); err != nil {
					return "", nil, err
				}
			}
			if data, err = s.rd.grow(data, value, cap(line)); err != nil {
				return "", nil, err
			}
			sawData = true
			if len(data) > maxEvent {
				return "", nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("stream event larger than %d bytes", maxEvent)}
			}
		}
	}
}

// readLine returns one line without its "\n" or "\r\n"; other is the
// capacity of the event's data, held with the line on the client's read
// bound.
func (s *Stream) readLine(other int) ([]byte, error) {
	var line []byte
	for {
		part, err := s.r.ReadSlice('\n')
		var gerr error
		if line, gerr = s.rd.grow(line, part, other); gerr != nil {
			return nil, gerr
		}
		if err == bufio.ErrBufferFull {
			if len(line) > maxEvent {
				return nil, &TransportError{Kind: Malformed, Err: fmt.Errorf("stream line longer than %d bytes", maxEvent)}
			}
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return bytes.TrimRight(line, "\r"), nil
			}
			return nil, err
		}
		return bytes.TrimRight(line[:len(line)-1], "\r"), nil
	}
}
