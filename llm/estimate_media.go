package llm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"image"
	_ "image/gif" // image.DecodeConfig reads the size of a GIF, PNG or JPEG
	_ "image/jpeg"
	_ "image/png"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What providers charge for the content parts that are not text, from their
// vision, audio and PDF guides. The numbers are the documented ones; where a
// guide gives none, or a part's size cannot be read, the estimate takes the
// largest a part of its kind can cost, so that a governor never admits more
// than the provider will count.
const (
	// OpenAI's tile-priced models (GPT-4o, GPT-4.1, GPT-4.5, GPT-5, o1,
	// o3): a "low" detail image costs the base; a "high" or "auto" one the
	// base plus a price per tile (below).
	openAIBase, openAITile = 85, 170
	// GPT-4o mini prices the same tiles about 33 times higher.
	miniBase, miniTile = 2833, 5667

	// The tiles: 512 px, of an image fitted in 2048×2048 and 768 px on its
	// short side, so at most 2×4 of them.
	tilePx, fitPx, shortSidePx, maxTiles = 512, 2048, 768, 8

	// OpenAI's patch-priced models (GPT-4.1 mini and nano, GPT-5 mini and
	// nano, o4-mini): a token per 32-px patch times the model's
	// multiplier, at most 1,536 patches, whatever the detail.
	patchPx, maxPatches = 32, 1536

	// Anthropic: about width×height/750 tokens (a token per 28-px square),
	// after the image is brought within the model's native resolution —
	// before Claude Opus 4.7, 1,568 px on the long edge and about 1.15
	// megapixels (~1,600 tokens); from Opus 4.7 on, 2,576 px and about 3.75
	// megapixels (~5,000 tokens).
	anthropicPxPerToken, anthropicPatchPx = 750, 28

	// Audio: OpenAI counts a token per 100 ms of a user's audio and
	// publishes no rate for input_audio in chat, where observed counts run
	// to about 1,000 tokens a minute; 20 tokens a second covers both. A
	// WAV file's duration is read from its header; any other file is taken
	// to be at 8 kbit/s, the lowest bitrate MP3 has, so none lasts longer
	// than it is priced for.
	audioTokensPerSecond   = 20
	audioMinBytesPerSecond = 1_000
	audioMaxBytesPerSecond = 768_000 // 192 kHz, stereo, 16 bits: a header claiming more is not believed

	// Files: OpenAI and Anthropic read a PDF as the text of each page plus
	// an image of it. Anthropic puts a page's text at 1,500–3,000 tokens;
	// a page is priced at 3,000 plus the model's largest image. A PDF whose
	// pages cannot be counted, or a file sent by id, is priced at 100 pages,
	// the most either provider reads in one request.
	pageTextTokens = 3_000
	maxFilePages   = 100

	// Bounds on the work of pricing one request: the bytes of an image's
	// data read for its size, and the bytes inflated while counting the
	// pages of its PDFs (past that, a PDF is priced at 100 pages).
	imageHeaderBytes  = 256 << 10
	audioHeaderBytes  = 64 << 10
	pdfInflatedBudget = 32 << 20
)

// imageKind is how a provider turns an image's size into tokens.
type imageKind uint8

const (
	tilesPriced   imageKind = iota + 1 // OpenAI's base + tiles
	patchesPriced                      // OpenAI's patches × multiplier
	areaPriced                         // Anthropic's pixels / 750
	mostPriced                         // the largest of mostImage's prices
)

// imagePrice says what one provider and model charge for an image.
type imagePrice struct {
	name       string // identifies the price in the count cache's key
	kind       imageKind
	base, tile int64   // tilesPriced
	multiplier float64 // patchesPriced
	longEdge   float64 // areaPriced: the native resolution's long edge, in pixels
	most       int64   // areaPriced: the most one image costs
}

var (
	gpt4oTiles = imagePrice{name: "tiles 85/170", kind: tilesPriced, base: openAIBase, tile: openAITile}
	gpt4oMini  = imagePrice{name: "tiles 2833/5667", kind: tilesPriced, base: miniBase, tile: miniTile}
	patches162 = imagePrice{name: "patches ×1.62", kind: patchesPriced, multiplier: 1.62}
	patches172 = imagePrice{name: "patches ×1.72", kind: patchesPriced, multiplier: 1.72}
	patches246 = imagePrice{name: "patches ×2.46", kind: patchesPriced, multiplier: 2.46}
	claude1568 = imagePrice{name: "area 1568", kind: areaPriced, longEdge: 1568, most: 1_600}
	claude2576 = imagePrice{name: "area 2576", kind: areaPriced, longEdge: 2576, most: 5_000}

	// mostImage prices an image at the largest of the general formulas:
	// what a provider or model without a documented price is assumed to
	// charge. GPT-4o mini's price is left out: it is one model's, set to
	// match another's price in dollars, and would make one image of an
	// unknown model cost 48,169 tokens.
	mostImage  = imagePrice{name: "most", kind: mostPriced}
	mostPrices = []imagePrice{gpt4oTiles, patches246, claude2576}
)

// imagePriceOf returns what profile p charges for an image sent to model.
// A model the profile's guide does not price, and a profile other than
// OpenAI's and Anthropic's (Groq documents no image price), gets mostImage.
func imagePriceOf(p Profile, model string) imagePrice {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	switch p {
	case OpenAI:
		return openAIImagePrice(m)
	case Anthropic:
		if major, minor, ok := claudeVersion(m); ok && (major < 4 || major == 4 && minor < 7) {
			return claude1568
		}
		return claude2576 // Opus 4.7, a later model, or one whose name tells no version
	}
	return mostImage
}

func openAIImagePrice(m string) imagePrice {
	gpt5 := strings.HasPrefix(m, "gpt-5")
	switch {
	case strings.HasPrefix(m, "gpt-4o-mini"):
		return gpt4oMini
	case strings.HasPrefix(m, "o4-mini"):
		return patches172
	case strings.HasPrefix(m, "gpt-4.1-mini"), gpt5 && strings.Contains(m, "-mini"):
		return patches162
	case strings.HasPrefix(m, "gpt-4.1-nano"), gpt5 && strings.Contains(m, "-nano"):
		return patches246
	case strings.HasPrefix(m, "gpt-"), strings.HasPrefix(m, "chatgpt-"), strings.HasPrefix(m, "computer-use"), oSeries(m):
		return gpt4oTiles
	}
	return mostImage // another server's model behind the OpenAI wire format
}

// oSeries reports whether m names one of OpenAI's o-series models (o1, o3,
// o4-mini...), not just any name that starts with an o.
func oSeries(m string) bool {
	if len(m) < 2 || m[0] != 'o' || m[1] < '0' || m[1] > '9' {
		return false
	}
	rest := strings.TrimLeft(m[1:], "0123456789")
	return rest == "" || rest[0] == '-' || rest[0] == '.'
}

// claudeVersion reads the version of a Claude model's name:
// "claude-3-5-sonnet-20241022" is 3.5, "claude-sonnet-4-20250514" 4.0,
// "claude-opus-4-7@20260416" 4.7. A date (eight digits) is not a version
// number.
func claudeVersion(m string) (major, minor int, ok bool) {
	m, _, _ = strings.Cut(m, "@")
	fields := strings.Split(m, "-")
	if fields[0] != "claude" {
		return 0, 0, false
	}
	var nums []int
	for _, f := range fields[1:] {
		if n, err := strconv.Atoi(f); err == nil && len(f) <= 2 {
			nums = append(nums, n)
		}
	}
	switch len(nums) {
	case 0:
		return 0, 0, false
	case 1:
		return nums[0], 0, true
	}
	return nums[0], nums[1], true
}

// tokens prices an image of w×h pixels (0×0: a size not known) at the given
// detail ("low" lowers only a tile-priced image). An unknown size costs the
// most an image of that detail can.
func (p imagePrice) tokens(w, h int64, detail string) int64 {
	if w <= 0 || h <= 0 {
		w, h = 0, 0
	}
	switch p.kind {
	case tilesPriced:
		if strings.EqualFold(strings.TrimSpace(detail), "low") {
			return p.base
		}
		return p.base + p.tile*tileCount(w, h)
	case patchesPriced:
		return int64(math.Ceil(float64(patchCount(w, h)) * p.multiplier))
	case areaPriced:
		return areaTokens(w, h, p.longEdge, p.most)
	}
	var n int64
	for _, q := range mostPrices {
		n = max(n, q.tokens(w, h, detail))
	}
	return n
}

// tileCount is the number of 512-px tiles OpenAI cuts a high-detail image
// into: fitted in 2048×2048, then scaled down to 768 px on its short side.
func tileCount(w, h int64) int64 {
	if w == 0 {
		return maxTiles
	}
	fw, fh := float64(w), float64(h)
	if long := max(fw, fh); long > fitPx {
		fw, fh = fw*fitPx/long, fh*fitPx/long
	}
	if short := min(fw, fh); short > shortSidePx {
		fw, fh = fw*shortSidePx/short, fh*shortSidePx/short
	}
	// A side within rounding of a tile's edge fills the tiles it spans.
	n := int64(math.Ceil(fw/tilePx-1e-9)) * int64(math.Ceil(fh/tilePx-1e-9))
	return min(max(n, 1), maxTiles)
}

// patchCount is the number of 32-px patches that cover the image, at most
// 1,536 (a larger image is scaled down to 1,536 patches).
func patchCount(w, h int64) int64 {
	if w == 0 {
		return maxPatches
	}
	pw, ph := min((w+patchPx-1)/patchPx, maxPatches), min((h+patchPx-1)/patchPx, maxPatches)
	return min(pw*ph, maxPatches)
}

// areaTokens prices an image at Anthropic's width×height/750, or a token per
// 28-px square it is padded to, whichever is more, after bringing its long
// edge within longEdge; most caps it, as the megapixel bound does.
func areaTokens(w, h int64, longEdge float64, most int64) int64 {
	if w == 0 {
		return most
	}
	fw, fh := float64(w), float64(h)
	if long := max(fw, fh); long > longEdge {
		fw, fh = fw*longEdge/long, fh*longEdge/long
	}
	byArea := math.Ceil(fw * fh / anthropicPxPerToken)
	bySquares := math.Ceil(fw/anthropicPatchPx) * math.Ceil(fh/anthropicPatchPx)
	return int64(min(max(byArea, bySquares), float64(most)))
}

// mediaPricer prices the parts of one request's messages that are not
// text. It is used by one goroutine, for one request.
type mediaPricer struct {
	model string
	image imagePrice
	// inflate is what the PDF page counter may still inflate while this
	// request is priced.
	inflate int64
}

func newMediaPricer(p Profile, model string) *mediaPricer {
	return &mediaPricer{model: model, image: imagePriceOf(p, model), inflate: pdfInflatedBudget}
}

// contentPart holds the fields of an OpenAI content part that are priced.
// A field that does not read as its kind is marked bad, and the array of
// parts reads on: one odd part does not leave the others unpriced.
type contentPart struct {
	Type       string       `json:"type"`
	ImageURL   *imageField  `json:"image_url"`
	InputAudio *lenientJSON `json:"input_audio"`
	File       *lenientJSON `json:"file"`
}

// imageField is an image_url part's {"url": ..., "detail": ...}, or the URL
// alone as some servers accept it.
type imageField struct {
	URL, Detail string
	bad         bool
}

func (f *imageField) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		f.bad = json.Unmarshal(b, &f.URL) != nil
		return nil
	}
	var v struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	}
	f.bad = json.Unmarshal(b, &v) != nil
	f.URL, f.Detail = v.URL, v.Detail
	return nil
}

// lenientJSON is an input_audio part's {"data": ...} or a file part's
// {"file_data": ...}.
type lenientJSON struct {
	Data     string `json:"data"`
	FileData string `json:"file_data"`
	bad      bool
}

func (f *lenientJSON) UnmarshalJSON(b []byte) error {
	type plain lenientJSON
	var v plain
	if json.Unmarshal(b, &v) != nil {
		f.bad = true
		return nil
	}
	*f = lenientJSON(v)
	return nil
}

// textParts are the part types whose text is counted as the message's
// Content (partsText) and cost nothing more.
var textParts = map[string]bool{"text": true, "input_text": true, "output_text": true, "refusal": true}

// tokens prices a message's content parts (RawContent) other than text:
// image_url, input_audio and file parts as the profile charges them. A part
// of another type (video, say) or one that does not read as its type says
// is priced as the largest image the model can be sent. The sum saturates.
func (mp *mediaPricer) tokens(raw json.RawMessage) int64 {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return 0
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		if _, ok := err.(*json.UnmarshalTypeError); !ok {
			return 0 // not JSON: nothing a provider would read either
		}
		// A part that is not an object, or whose type is not a string, is
		// left with no type, and is priced as one of an unknown type.
	}
	var n int64
	for i := range parts {
		n = addTokens(n, mp.part(&parts[i]))
	}
	return n
}

func (mp *mediaPricer) part(p *contentPart) int64 {
	unknown := mp.image.tokens(0, 0, "")
	switch {
	case textParts[p.Type]:
		return 0
	case p.Type == "image_url":
		if p.ImageURL == nil || p.ImageURL.bad {
			return unknown
		}
		w, h := imageSize(p.ImageURL.URL)
		return mp.image.tokens(w, h, p.ImageURL.Detail)
	case p.Type == "input_audio":
		if p.InputAudio == nil || p.InputAudio.bad || p.InputAudio.Data == "" {
			return unknown
		}
		return audioTokens(p.InputAudio.Data)
	case p.Type == "file":
		if p.File == nil || p.File.bad {
			return mp.fileTokens("")
		}
		return mp.fileTokens(p.File.FileData)
	}
	return unknown
}

// imageSize reads the width and height of an image sent as a base64 data:
// URL from its header (PNG, JPEG, GIF or WebP), decoding at most
// imageHeaderBytes of it. 0, 0 means not known: a URL to fetch, another
// format, or a header that does not read.
func imageSize(url string) (w, h int64) {
	_, payload, ok := parseDataURL(url)
	if !ok {
		return 0, 0
	}
	head := decodeBase64(payload, imageHeaderBytes)
	if w, h, ok := webpSize(head); ok {
		return w, h
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(head))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0
	}
	return int64(cfg.Width), int64(cfg.Height)
}

// webpSize reads a WebP file's canvas size (the standard library has no
// WebP decoder): an extended file's VP8X chunk, or a simple file's lossless
// (VP8L) or lossy (VP8) frame header.
func webpSize(b []byte) (w, h int64, ok bool) {
	if len(b) < 30 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return 0, 0, false
	}
	u24 := func(p []byte) int64 { return int64(p[0]) | int64(p[1])<<8 | int64(p[2])<<16 }
	switch string(b[12:16]) {
	case "VP8X":
		return 1 + u24(b[24:27]), 1 + u24(b[27:30]), true
	case "VP8L":
		if b[20] != 0x2f {
			return 0, 0, false
		}
		bits := binary.LittleEndian.Uint32(b[21:25])
		return 1 + int64(bits&0x3fff), 1 + int64(bits>>14&0x3fff), true
	case "VP8 ":
		if b[23] != 0x9d || b[24] != 0x01 || b[25] != 0x2a {
			return 0, 0, false
		}
		w, h := int64(binary.LittleEndian.Uint16(b[26:28])&0x3fff), int64(binary.LittleEndian.Uint16(b[28:30])&0x3fff)
		return w, h, w > 0 && h > 0
	}
	return 0, 0, false
}

// parseDataURL splits a base64 data: URL ("data:image/png;base64,iVBOR...")
// into its media type and payload. ok is false for any other URL, and for a
// data: URL that is not base64 (its size is not read).
func parseDataURL(u string) (mediaType, payload string, ok bool) {
	u = strings.TrimSpace(u)
	if len(u) < 5 || !strings.EqualFold(u[:5], "data:") {
		return "", "", false
	}
	header, payload, found := strings.Cut(u[5:], ",")
	if !found || len(header) > 256 {
		return "", "", false
	}
	params := strings.Split(header, ";")
	if !strings.EqualFold(strings.TrimSpace(params[len(params)-1]), "base64") {
		return "", "", false
	}
	return strings.ToLower(strings.TrimSpace(params[0])), payload, true
}

// decodeBase64 decodes at most limit bytes from the start of s (limit < 0:
// all of it), in the standard or URL alphabet, padded or not. Line breaks
// are skipped. What does not decode is cut off: a payload that is not
// base64 at all gives nothing.
func decodeBase64(s string, limit int) []byte {
	if limit >= 0 {
		if n := 4 * ((limit + 2) / 3); n < len(s) {
			s = s[:n] // a whole number of quanta, so no padding is missing
		}
	}
	var best []byte
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.DecodeString(s)
		if err == nil {
			return b
		}
		if len(b) > len(best) {
			best = b
		}
	}
	return best
}

// decodedLen is how many bytes a base64 text of n characters holds, rounded
// up: a little more than the truth when it is padded or broken into lines.
func decodedLen(n int) int64 { return (int64(n)*3 + 3) / 4 }

// audioTokens prices an input_audio part's data (base64, or a base64 data:
// URL) at audioTokensPerSecond of its duration: the length of its data over
// the byte rate of its WAV header, or over 8 kbit/s for anything else.
func audioTokens(data string) int64 {
	if _, payload, ok := parseDataURL(data); ok {
		data = payload
	}
	rate, ok := wavByteRate(decodeBase64(data, audioHeaderBytes))
	if !ok {
		rate = audioMinBytesPerSecond
	}
	seconds := float64(decodedLen(len(data))) / float64(rate)
	return ceilTokens(seconds * audioTokensPerSecond)
}

// wavByteRate reads the bytes per second of a RIFF/WAVE file's "fmt "
// chunk: the smaller of the rate it states and the one its sample rate,
// channels and sample size make, held between 8 kbit/s and
// audioMaxBytesPerSecond, so a header cannot make a long file look short.
func wavByteRate(b []byte) (int64, bool) {
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return 0, false
	}
	for off, chunks := 12, 0; off+8 <= len(b) && chunks < 64; chunks++ {
		size := int64(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		if string(b[off:off+4]) == "fmt " {
			f := b[off+8:]
			if size < 16 || len(f) < 16 {
				return 0, false
			}
			channels := int64(binary.LittleEndian.Uint16(f[2:4]))
			sampleRate := int64(binary.LittleEndian.Uint32(f[4:8]))
			stated := int64(binary.LittleEndian.Uint32(f[8:12]))
			bits := int64(binary.LittleEndian.Uint16(f[14:16]))
			rate := sampleRate * channels * bits / 8
			if stated > 0 && (rate <= 0 || stated < rate) {
				rate = stated
			}
			if rate <= 0 {
				return 0, false
			}
			return min(max(rate, audioMinBytesPerSecond), audioMaxBytesPerSecond), true
		}
		next := int64(off) + 8 + size + size&1
		if next > int64(len(b)) {
			break
		}
		off = int(next)
	}
	return 0, false
}

// fileTokens prices a file part's file_data (a base64 data: URL, or bare
// base64): a PDF by its pages, each its text and an image; a text file by
// its tokens; any other file at a token per byte. A file sent by id, or data
// that does not decode, is priced at the most a request's files can cost.
func (mp *mediaPricer) fileTokens(data string) int64 {
	perPage := pageTextTokens + mp.image.tokens(0, 0, "high")
	worst := maxFilePages * perPage
	mediaType := ""
	if strings.HasPrefix(strings.TrimSpace(data), "data:") {
		var ok bool
		if mediaType, data, ok = parseDataURL(data); !ok {
			return worst
		}
	}
	b := decodeBase64(data, -1)
	if len(b) == 0 || len(b) < len(data)/2 { // nothing, or not base64
		return worst
	}
	if mediaType == "application/pdf" || bytes.Contains(b[:min(len(b), 1024)], []byte("%PDF-")) {
		pages, ok := pdfPages(b, &mp.inflate)
		if !ok {
			return worst
		}
		return mulTokens(pages, perPage)
	}
	if utf8.Valid(b) {
		return int64(CountTokens(mp.model, string(b)))
	}
	return int64(len(b))
}

// addTokens adds two non-negative counts, held at math.MaxInt64.
func addTokens(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mulTokens multiplies two non-negative counts, held at math.MaxInt64.
func mulTokens(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
