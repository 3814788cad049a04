package health

import "time"

// maxSamples bounds a Sampler's memory whatever window and interval it is
// given.
const maxSamples = 4096

// Sampler keeps a job's processed count over the last window, one sample
// per interval, in a ring of bounded size, and measures its rate from
// them. It is not safe for simultaneous use; the Monitor keeps one per job.
type Sampler struct {
	window, every time.Duration
	ring          []sample
	head, n       int // ring[head] is the oldest of n samples
}

type sample struct {
	at    time.Time
	count int64
}

// NewSampler returns a Sampler measuring over window (default 1h) with
// samples at least every apart (default a minute), keeping at most
// window/every+2 of them, and never more than 4096.
func NewSampler(window, every time.Duration) *Sampler {
	if window <= 0 {
		window = time.Hour
	}
	if every <= 0 {
		every = time.Minute
	}
	size := min(int64(window/every)+2, maxSamples)
	return &Sampler{window: window, every: every, ring: make([]sample, size)}
}

func (s *Sampler) at(i int) *sample { return &s.ring[(s.head+i)%len(s.ring)] }

// Add records the processed count at t. A sample less than the interval
// after the one before the newest replaces the newest, so samples taken
// more often than the interval still span the window. A count lower than
// the newest (the job's items were reset) or a time before it starts over.
func (s *Sampler) Add(t time.Time, processed int64) {
	if s.n > 0 {
		last := s.at(s.n - 1)
		if processed < last.count || t.Before(last.at) {
			s.n = 0
		} else if s.n >= 2 && t.Sub(s.at(s.n-2).at) < s.every {
			*last = sample{t, processed}
			return
		}
	}
	if s.n == len(s.ring) {
		s.head = (s.head + 1) % len(s.ring)
		s.n--
	}
	*s.at(s.n) = sample{t, processed}
	s.n++
}

// PerHour is the processed count's rate per hour from the oldest sample
// within the window before the newest to the newest; 0 with fewer than two
// such samples.
func (s *Sampler) PerHour() float64 {
	if s.n < 2 {
		return 0
	}
	last := s.at(s.n - 1)
	for i := range s.n - 1 {
		first := s.at(i)
		span := last.at.Sub(first.at)
		if span > s.window {
			continue
		}
		if span <= 0 {
			return 0
		}
		return float64(last.count-first.count) / span.Hours()
	}
	return 0
}
