package llm

import (
	"fmt"
	"io"
	"net/http"

	"github.com/sluice-dev/sluice/internal/num"
)

// DefaultMaxReadBytes is Config.MaxReadBytes's default: room for two of
// the largest plain answers read at once, or thousands of ordinary ones.
const DefaultMaxReadBytes = 256 << 20

// minReadBytes is the least Config.MaxReadBytes may be: the first chunk
// of every answer must fit, with room to spare.
const minReadBytes = 64 << 10

// maxBody bounds what is read of one non-streamed response.
const maxBody = 64 << 20

// reading is what one answer being read holds of its client's bound on
// the bytes of answers read at once (Config.MaxReadBytes). It is used by
// one goroutine; release gives back all it holds.
type reading struct {
	c    *Client
	held int64
}

// hold makes what the answer holds n bytes, if it holds fewer, or fails at
// once: an answer never waits for another to end, so answers that each
// hold part of the bound cannot wait for one another for ever.
func (r *reading) hold(n int64) error {
	if n <= r.held {
		return nil
	}
	if !r.c.reads.TryAcquire(n - r.held) {
		return fmt.Errorf("the answers being read at once would pass the client's bound of %s bytes (llm.Config.MaxReadBytes): this one was cut at %s bytes",
			num.Group(r.c.cfg.MaxReadBytes), num.Group(r.held))
	}
	r.held = n
	return nil
}

func (r *reading) release() {
	if r.held > 0 {
		r.c.reads.Release(r.held)
		r.held = 0
	}
}

// readBody reads a non-streamed answer's body, at most maxBody bytes,
// holding them on the client's read bound while it reads. A body of
// announced length is read into one buffer of that size. Any other is
// read in chunks, each held before it is made, and joined at the end: at
// most twice the body, for a moment, where a buffer grown by copying
// (io.ReadAll) holds its old and new arrays at each step.
func (c *Client) readBody(resp *http.Response) ([]byte, error) {
	rd := reading{c: c}
	defer rd.release()
	if n := resp.ContentLength; n > maxBody {
		return nil, fmt.Errorf("response body of %s bytes announced: larger than %s bytes", num.Group(n), num.Group(maxBody))
	} else if n >= 0 {
		if err := rd.hold(n); err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var chunks [][]byte
	total, size := 0, 8<<10
	for {
		if err := rd.hold(int64(total + size)); err != nil {
			return nil, err
		}
		chunk := make([]byte, size)
		n, err := fill(resp.Body, chunk)
		chunks = append(chunks, chunk[:n])
		total += n
		if total > maxBody {
			return nil, fmt.Errorf("response body larger than %s bytes", num.Group(maxBody))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, 4<<20, maxBody+1-total)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	if err := rd.hold(rd.held + int64(total)); err != nil {
		return nil, err
	}
	out := make([]byte, 0, total)
	for _, ch := range chunks {
		out = append(out, ch...)
	}
	return out, nil
}

// fill reads into p until it is full or the reader fails: io.EOF when the
// body ended, any other error as it came (a body cut short is an
// io.ErrUnexpectedEOF of the transport's, not an end).
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// freeEvent is how much of a stream's event being read is not held on
// the read bound: the events of a stream are small, and most streams
// then never touch the bound, as the 16 KiB of their bufio.Reader do not.
const freeEvent = 16 << 10

// grow appends p to b for a stream's event being read, holding on the
// client's read bound, past freeEvent, the array b then has, its old one
// while it is copied, and other, the event's other buffer.
func (r *reading) grow(b, p []byte, other int) ([]byte, error) {
	if n := len(b) + len(p); n > cap(b) {
		c := max(n, 2*cap(b))
		if need := int64(cap(b) + c + other); need > freeEvent {
			if err := r.hold(need); err != nil {
				return nil, err
			}
		}
		nb := make([]byte, len(b), c)
		copy(nb, b)
		b = nb
	}
	return append(b, p...), nil
}
