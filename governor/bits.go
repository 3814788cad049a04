package governor

import "math/bits"

// bitIndex is a set of small non-negative integers that finds the next
// member at or after a number in O(log₆₄ n): a bitmap with, above each
// level, a bitmap of its words that are not zero.
type bitIndex struct {
	levels [][]uint64 // levels[0] has a bit per member; the last one word
}

// grow makes room for members below n, keeping the members.
func (b *bitIndex) grow(n int) {
	if len(b.levels) > 0 && n <= len(b.levels[0])*64 {
		return
	}
	words := max(2*len(b.levelZero()), (n+63)/64)
	low := make([]uint64, words)
	copy(low, b.levelZero())
	b.levels = [][]uint64{low}
	for len(b.levels[len(b.levels)-1]) > 1 {
		below := b.levels[len(b.levels)-1]
		up := make([]uint64, (len(below)+63)/64)
		for i, w := range below {
			if w != 0 {
				up[i>>6] |= 1 << (i & 63)
			}
		}
		b.levels = append(b.levels, up)
	}
}

func (b *bitIndex) levelZero() []uint64 {
	if len(b.levels) == 0 {
		return nil
	}
	return b.levels[0]
}

// put adds i to the set when in is true, and takes it out otherwise.
func (b *bitIndex) put(i int, in bool) {
	if !in {
		if len(b.levels) == 0 || i >= len(b.levels[0])*64 {
			return
		}
		for lv := range b.levels {
			w := &b.levels[lv][i>>6]
			*w &^= 1 << (i & 63)
			if *w != 0 {
				return
			}
			i >>= 6
		}
		return
	}
	b.grow(i + 1)
	for lv := range b.levels {
		w := &b.levels[lv][i>>6]
		was := *w
		*w |= 1 << (i & 63)
		if was != 0 {
			return
		}
		i >>= 6
	}
}

// has reports whether i is in the set.
func (b *bitIndex) has(i int) bool {
	return len(b.levels) > 0 && i < len(b.levels[0])*64 && b.levels[0][i>>6]&(1<<(i&63)) != 0
}

// next returns the least member not below i, or -1 if there is none.
func (b *bitIndex) next(i int) int { return b.nextAt(0, i) }

func (b *bitIndex) nextAt(lv, i int) int {
	if lv >= len(b.levels) {
		return -1
	}
	level := b.levels[lv]
	w := i >> 6
	if w >= len(level) {
		return -1
	}
	if rest := level[w] & (^uint64(0) << (i & 63)); rest != 0 {
		return w<<6 + bits.TrailingZeros64(rest)
	}
	u := b.nextAt(lv+1, w+1)
	if u < 0 {
		return -1
	}
	return u<<6 + bits.TrailingZeros64(level[u])
}
