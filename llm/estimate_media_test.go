package llm

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
)

// TestImagePrices: each profile prices an image as its guide says, by
// model, size and detail; an unknown size costs the most an image of that
// detail can, and a huge one is capped as the provider scales it down.
func TestImagePrices(t *testing.T) {
	t.Parallel()
	const huge = math.MaxInt32
	tests := []struct {
		name    string
		profile Profile
		model   string
		w, h    int64
		detail  string
		want    int64
	}{
		{"gpt-4o low, size unknown", OpenAI, "gpt-4o", 0, 0, "low", 85},
		{"gpt-4o low is low in any case", OpenAI, "gpt-4o", 0, 0, " LOW", 85},
		{"gpt-4o low, size known", OpenAI, "gpt-4o", 1024, 1024, "low", 85},
		{"gpt-4o high, size unknown: 2×4 tiles", OpenAI, "gpt-4o", 0, 0, "high", 85 + 8*170},
		{"gpt-4o auto is high", OpenAI, "gpt-4o", 0, 0, "auto", 85 + 8*170},
		{"gpt-4o no detail is auto", OpenAI, "gpt-4o", 0, 0, "", 85 + 8*170},
		{"gpt-4o an unknown detail is auto", OpenAI, "gpt-4o", 0, 0, "original", 85 + 8*170},
		{"gpt-4o high 1024×1024 (the guide's example)", OpenAI, "gpt-4o", 1024, 1024, "high", 765},
		{"gpt-4o high 2048×4096 (the guide's example)", OpenAI, "gpt-4o", 2048, 4096, "high", 1105},
		{"gpt-4o high 512×512: one tile", OpenAI, "gpt-4o", 512, 512, "high", 255},
		{"gpt-4o high, huge: fitted and capped", OpenAI, "gpt-4o", huge, huge, "high", 765},
		{"gpt-4o high, a thin strip", OpenAI, "gpt-4o", 100_000, 10, "high", 85 + 4*170},
		{"a vendor prefix is read past", OpenAI, "openai/gpt-4.1", 0, 0, "high", 1445},
		{"gpt-5 is tile-priced", OpenAI, "gpt-5", 1024, 1024, "high", 765},
		{"o3 is tile-priced", OpenAI, "o3", 0, 0, "low", 85},
		{"gpt-4o-mini low", OpenAI, "gpt-4o-mini", 0, 0, "low", 2833},
		{"gpt-4o-mini high 1024×1024", OpenAI, "gpt-4o-mini-2024-07-18", 1024, 1024, "high", 2833 + 4*5667},
		{"gpt-4o-mini high, size unknown", OpenAI, "gpt-4o-mini", 0, 0, "auto", 2833 + 8*5667},
		{"gpt-4.1-mini patches 1024×1024", OpenAI, "gpt-4.1-mini", 1024, 1024, "high", 1659},
		{"gpt-4.1-mini ignores low", OpenAI, "gpt-4.1-mini", 0, 0, "low", 2489},
		{"gpt-4.1-mini huge: 1,536 patches", OpenAI, "gpt-4.1-mini", huge, huge, "high", 2489},
		{"gpt-5.4-mini patches", OpenAI, "gpt-5.4-mini", 1024, 1024, "high", 1659},
		{"gpt-5-nano, size unknown", OpenAI, "gpt-5-nano", 0, 0, "", 3779},
		{"o4-mini patches", OpenAI, "o4-mini", 1024, 1024, "", 1762},
		{"another server's model on the openai wire: the most", OpenAI, "llava-13b", 0, 0, "low", 5000},
		{"another server's model, 512×512", OpenAI, "llava-13b", 512, 512, "low", 630},
		{"claude 4.5 1000×1000", Anthropic, "claude-sonnet-4-5-20250929", 1000, 1000, "", 1334},
		{"claude 4.5 200×200 (28-px squares)", Anthropic, "claude-sonnet-4-5-20250929", 200, 200, "", 64},
		{"claude 4.5 1092×1092", Anthropic, "claude-sonnet-4-5", 1092, 1092, "", 1590},
		{"claude 4.5 huge: capped", Anthropic, "claude-sonnet-4-5", 8000, 8000, "", 1600},
		{"claude 4.5 size unknown", Anthropic, "claude-sonnet-4-5", 0, 0, "low", 1600},
		{"claude 3.5 size unknown", Anthropic, "claude-3-5-sonnet-20241022", 0, 0, "", 1600},
		{"claude 4 size unknown", Anthropic, "claude-sonnet-4-20250514", 0, 0, "", 1600},
		{"claude opus 4.7 size unknown", Anthropic, "claude-opus-4-7", 0, 0, "", 5000},
		{"claude opus 4.7 huge: capped", Anthropic, "claude-opus-4-7", huge, huge, "", 5000},
		{"claude opus 4.7 1000×1000", Anthropic, "claude-opus-4-7", 1000, 1000, "", 1334},
		{"claude opus 4.7 named with its date after @", Anthropic, "claude-opus-4-7@20260416", 0, 0, "", 5000},
		{"claude 4.5 named with its date after @", Anthropic, "claude-sonnet-4-5@20250929", 0, 0, "", 1600},
		{"a claude named by another cloud: the newest", Anthropic, "anthropic.claude-3-haiku-20240307-v1:0", 0, 0, "", 5000},
		{"a claude without a version: the newest", Anthropic, "claude-latest", 0, 0, "", 5000},
		{"groq size unknown: the most", Groq, "meta-llama/llama-4-scout-17b-16e-instruct", 0, 0, "low", 5000},
		{"groq 1024×1024: the most of the formulas", Groq, "meta-llama/llama-4-scout-17b-16e-instruct", 1024, 1024, "high", 2520},
		{"groq 512×512 low", Groq, "llama-4-scout", 512, 512, "low", 630},
		{"groq huge", Groq, "llama-4-scout", huge, huge, "", 5000},
		{"no profile: the most", "", "gpt-4o", 0, 0, "low", 5000},
		{"no profile 512×512", "", "gpt-4o", 512, 512, "high", 630},
	}
	for _, tt := range tests {
		if got := imagePriceOf(tt.profile, tt.model).tokens(tt.w, tt.h, tt.detail); got != tt.want {
			t.Errorf("%s: %d tokens, want %d", tt.name, got, tt.want)
		}
	}
}

// Images made in the test: a PNG, a JPEG, a GIF, and WebP headers.
func encodedImage(t testing.TB, format string, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&b, img)
	case "jpeg":
		err = jpeg.Encode(&b, img, nil)
	case "gif":
		err = gif.Encode(&b, img, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func webpVP8X(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00\x00\x00\x00\x00")
	return append(b, byte(w-1), byte((w-1)>>8), byte((w-1)>>16), byte(h-1), byte((h-1)>>8), byte((h-1)>>16))
}

func webpVP8L(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8L\x00\x00\x00\x00\x2f")
	b = binary.LittleEndian.AppendUint32(b, uint32(w-1)|uint32(h-1)<<14)
	return append(b, 0, 0, 0, 0, 0)
}

func webpVP8(w, h int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8 \x00\x00\x00\x00\x00\x00\x00\x9d\x01\x2a")
	b = binary.LittleEndian.AppendUint16(b, uint16(w))
	return binary.LittleEndian.AppendUint16(b, uint16(h))
}

// pngHeader is a PNG signature and an IHDR chunk stating w×h, with its
// checksum right: what the decoder reads for the size.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR")
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, h)
	b = append(b, 8, 2, 0, 0, 0)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[12:]))
}

func dataURL(mediaType string, b []byte) string {
	return "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(b)
}

// TestImageSizeFromDataURL: the size of an image sent inline is read from
// its header, whatever its format, and nothing else of it; a URL or data
// that does not read gives no size.
func TestImageSizeFromDataURL(t *testing.T) {
	t.Parallel()
	// A JPEG whose size comes after 320 KiB of metadata: past what is read.
	j := encodedImage(t, "jpeg", 64, 48)
	late := append([]byte{}, j[:2]...)
	for range 5 {
		late = append(late, 0xff, 0xe1, 0xff, 0xff) // an APP1 segment of 65,533 bytes
		late = append(late, make([]byte, 0xffff-2)...)
	}
	late = append(late, j[2:]...)
	tests := []struct {
		name string
		url  string
		w, h int64
	}{
		{"png", dataURL("image/png", encodedImage(t, "png", 300, 200)), 300, 200},
		{"jpeg", dataURL("image/jpeg", encodedImage(t, "jpeg", 640, 480)), 640, 480},
		{"gif", dataURL("image/gif", encodedImage(t, "gif", 10, 20)), 10, 20},
		{"webp extended", dataURL("image/webp", webpVP8X(4000, 3000)), 4000, 3000},
		{"webp lossless", dataURL("image/webp", webpVP8L(1024, 768)), 1024, 768},
		{"webp lossy", dataURL("image/webp", webpVP8(800, 600)), 800, 600},
		{"the media type is not trusted", dataURL("image/jpeg", encodedImage(t, "png", 30, 20)), 30, 20},
		{"URL-safe base64 without padding", "data:image/png;base64," + base64.RawURLEncoding.EncodeToString(encodedImage(t, "png", 33, 17)), 33, 17},
		{"base64 broken into lines", "data:image/png;base64," + breakLines(base64.StdEncoding.EncodeToString(encodedImage(t, "png", 70, 50))), 70, 50},
		{"only the header sent", dataURL("image/png", pngHeader(3000, 2000)), 3000, 2000},
		{"a huge size", dataURL("image/png", pngHeader(1<<28, 1<<28)), 1 << 28, 1 << 28},
		{"a huge gif", dataURL("image/gif", []byte("GIF89a\xff\xff\xff\xff\x00\x00\x00")), 65535, 65535},
		{"a jpeg whose size is past the bound", dataURL("image/jpeg", late), 0, 0},
		{"a zero size", dataURL("image/png", pngHeader(0, 0)), 0, 0},
		{"a size the format cannot have", dataURL("image/png", pngHeader(math.MaxUint32, 1)), 0, 0},
		{"a URL to fetch", "https://example.com/cat.png", 0, 0},
		{"no data", "data:image/png;base64,", 0, 0},
		{"not base64", "data:image/png;base64,!!!!????", 0, 0},
		{"a data URL that is not base64", "data:image/svg+xml,<svg width='10' height='10'/>", 0, 0},
		{"no comma", "data:image/png;base64", 0, 0},
		{"a header too long", "data:image/png;" + strings.Repeat("x=y;", 100) + "base64," + base64.StdEncoding.EncodeToString(pngHeader(10, 10)), 0, 0},
		{"a truncated header", dataURL("image/png", pngHeader(10, 10)[:20]), 0, 0},
		{"a truncated webp", dataURL("image/webp", webpVP8X(10, 10)[:25]), 0, 0},
		{"a webp with a broken frame", dataURL("image/webp", append(webpVP8(10, 10)[:23], 0, 0, 0, 10, 0, 10, 0)), 0, 0},
		{"text", dataURL("image/png", []byte("hello, world")), 0, 0},
		{"empty", "", 0, 0},
	}
	for _, tt := range tests {
		if w, h := imageSize(tt.url); w != tt.w || h != tt.h {
			t.Errorf("%s: %d×%d, want %d×%d", tt.name, w, h, tt.w, tt.h)
		}
	}
}

func breakLines(s string) string {
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76] + "\r\n")
		s = s[76:]
	}
	b.WriteString(s)
	return b.String()
}

// priceParts prices one message's content parts, given as JSON.
func priceParts(t testing.TB, p Profile, model, parts string) int64 {
	t.Helper()
	return priceInflating(t, p, model, parts, pdfInflatedBudget)
}

// priceInflating is priceParts with another bound on the bytes inflated.
func priceInflating(t testing.TB, p Profile, model, parts string, budget int64) int64 {
	t.Helper()
	var m Message
	if err := m.UnmarshalJSON([]byte(`{"role":"user","content":` + parts + `}`)); err != nil {
		t.Fatal(err)
	}
	mp := newMediaPricer(p, model)
	mp.inflate = budget
	return mp.tokens(m.RawContent)
}

func imagePart(url, detail string) string {
	return fmt.Sprintf(`{"type":"image_url","image_url":{"url":%q,"detail":%q}}`, url, detail)
}

// TestMediaParts: every kind of part is priced, on each profile; one that
// does not read as its type says costs the most an image can.
func TestMediaParts(t *testing.T) {
	t.Parallel()
	png300 := dataURL("image/png", encodedImage(t, "png", 300, 200))
	jpeg640 := dataURL("image/jpeg", encodedImage(t, "jpeg", 640, 480))
	tests := []struct {
		name    string
		profile Profile
		model   string
		parts   string
		want    int64
	}{
		{"text only", OpenAI, "gpt-4o", `[{"type":"text","text":"hello"}]`, 0},
		{"a refusal", OpenAI, "gpt-4o", `[{"type":"refusal","refusal":"no"}]`, 0},
		{"a string content", OpenAI, "gpt-4o", `"hello"`, 0},
		{"a png, high", OpenAI, "gpt-4o", `[` + imagePart(png300, "high") + `]`, 255},
		{"a jpeg, auto: two tiles", OpenAI, "gpt-4o", `[` + imagePart(jpeg640, "auto") + `]`, 85 + 2*170},
		{"a jpeg, low", OpenAI, "gpt-4o", `[` + imagePart(jpeg640, "low") + `]`, 85},
		{"a URL, high", OpenAI, "gpt-4o", `[` + imagePart("https://example.com/a.png", "high") + `]`, 1445},
		{"the URL as a string", OpenAI, "gpt-4o", `[{"type":"image_url","image_url":"https://example.com/a.png"}]`, 1445},
		{"a malformed data URL: the worst for its detail", OpenAI, "gpt-4o", `[` + imagePart("data:image/png;base64,%%%", "low") + `]`, 85},
		{"a jpeg on claude", Anthropic, "claude-sonnet-4-5", `[` + imagePart(jpeg640, "low") + `]`, 414},
		{"a jpeg on groq", Groq, "llama-4-scout", `[` + imagePart(jpeg640, "low") + `]`, 738},
		{"text and two images", OpenAI, "gpt-4o", `[{"type":"text","text":"compare"},` + imagePart(png300, "high") + `,` + imagePart("https://x.test/b.jpg", "low") + `]`, 255 + 85},
		{"an image_url that is a number", OpenAI, "gpt-4o", `[{"type":"image_url","image_url":5}]`, 1445},
		{"an image_url that is missing", OpenAI, "gpt-4o", `[{"type":"image_url"}]`, 1445},
		{"an unknown type", OpenAI, "gpt-4o", `[{"type":"video_url","video_url":{"url":"https://x.test/v.mp4"}}]`, 1445},
		{"no type", Anthropic, "claude-sonnet-4-5", `[{"image_url":{"url":"x"}}]`, 1600},
		{"a type that is not a string", Groq, "m", `[{"type":7}]`, 5000},
		{"an audio part without data", OpenAI, "gpt-4o-audio-preview", `[{"type":"input_audio","input_audio":{"format":"wav"}}]`, 1445},
		{"an audio part that is a string", OpenAI, "gpt-4o-audio-preview", `[{"type":"input_audio","input_audio":"abc"}]`, 1445},
		{"a file by id: 100 pages", OpenAI, "gpt-4o", `[{"type":"file","file":{"file_id":"file-abc"}}]`, 100 * (3000 + 1445)},
		{"a file by id on claude", Anthropic, "claude-sonnet-4-5", `[{"type":"file","file":{"file_id":"file-abc"}}]`, 100 * (3000 + 1600)},
		{"a file that is a string", Groq, "m", `[{"type":"file","file":"abc"}]`, 100 * (3000 + 5000)},
	}
	for _, tt := range tests {
		if got := priceParts(t, tt.profile, tt.model, tt.parts); got != tt.want {
			t.Errorf("%s: %d tokens, want %d", tt.name, got, tt.want)
		}
	}
}

// wav is a RIFF/WAVE file of the given format with n bytes of samples.
func wav(sampleRate, channels, bits, statedRate uint32, n int) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WAVE")
	b = append(b, "LIST\x04\x00\x00\x00INFO"...) // a chunk before the format
	b = append(b, "fmt \x10\x00\x00\x00\x01\x00"...)
	b = binary.LittleEndian.AppendUint16(b, uint16(channels))
	b = binary.LittleEndian.AppendUint32(b, sampleRate)
	b = binary.LittleEndian.AppendUint32(b, statedRate)
	b = binary.LittleEndian.AppendUint16(b, uint16(channels*bits/8))
	b = binary.LittleEndian.AppendUint16(b, uint16(bits))
	b = append(b, "data"...)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return append(b, make([]byte, n)...)
}

func audioPart(data string) string {
	return fmt.Sprintf(`[{"type":"input_audio","input_audio":{"data":%q,"format":"wav"}}]`, data)
}

// TestAudioTokens: audio is priced at 20 tokens a second of its duration:
// a WAV file's from its header, held within bounds, anything else's at
// 8 kbit/s.
func TestAudioTokens(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name string
		data string
		want int64
	}{
		// 16 kHz mono 16-bit: 32,000 bytes a second; 1 s and a 56-byte header.
		{"1 s of 16 kHz wav", b64(wav(16000, 1, 16, 32000, 32_000)), 21},
		{"as a data URL", dataURL("audio/wav", wav(16000, 1, 16, 32000, 32_000)), 21},
		{"a stated rate below the format's is believed", b64(wav(16000, 1, 16, 16000, 32_000)), 41},
		{"a stated rate above the format's is not", b64(wav(16000, 1, 16, 1<<30, 32_000)), 21},
		{"a rate over 768,000 B/s is not believed", b64(wav(4_000_000, 8, 32, 1<<30, 76_800)), 3},
		{"a rate under 8 kbit/s counts as 8 kbit/s", b64(wav(100, 1, 8, 100, 9_943)), 200},
		{"no rate at all", b64(wav(0, 0, 0, 0, 9_943)), 200},
		// 9,999 bytes that are not WAV: 9.999 s at 8 kbit/s.
		{"mp3 or anything else", b64(make([]byte, 9_999)), 200},
		{"a truncated header", b64([]byte("RIFF\x00\x00\x00\x00WAVEfmt \x10\x00")), 1},
		{"not base64", strings.Repeat("!", 4000), 60},
	}
	for _, tt := range tests {
		if got := priceParts(t, OpenAI, "gpt-4o-audio-preview", audioPart(tt.data)); got != tt.want {
			t.Errorf("%s: %d tokens, want %d", tt.name, got, tt.want)
		}
	}
}

// A PDF of the given objects, as a file part.
func pdfPart(mediaType string, objects ...string) string {
	body := "%PDF-1.5\n" + strings.Join(objects, "\n") + "\ntrailer\n<</Root 1 0 R>>\n%%EOF\n"
	return fmt.Sprintf(`[{"type":"file","file":{"filename":"a.pdf","file_data":%q}}]`, dataURL(mediaType, []byte(body)))
}

// objectStream is a PDF 1.5 object stream holding the given dictionaries,
// Flate-compressed.
func objectStream(t testing.TB, dicts ...string) string {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	if _, err := w.Write([]byte("3 0 4 40 5 80 " + strings.Join(dicts, "\n"))); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("9 0 obj\n<</Type/ObjStm/N %d/First 14/Filter/FlateDecode/Length %d>>\nstream\r\n%s\r\nendstream\nendobj",
		len(dicts), z.Len(), z.Bytes())
}

// TestFileTokens: a PDF is priced by its pages, counted where it keeps
// them, each 3,000 tokens of text and the model's largest image; a PDF whose
// pages cannot be counted at 100 pages; other files by their text or bytes.
func TestFileTokens(t *testing.T) {
	t.Parallel()
	catalog := "1 0 obj\n<</Type /Catalog /Pages 2 0 R>>\nendobj\n2 0 obj\n<</Type /Pages /Kids [3 0 R 4 0 R] /Count 2>>\nendobj"
	page := "3 0 obj\n<</Type /Page /Parent 2 0 R>>\nendobj"
	page2 := "4 0 obj\n<< /Type\n% a comment\n/Page /Parent 2 0 R >>\nendobj"
	const gpt4o = 3000 + 1445 // a page on gpt-4o
	tests := []struct {
		name    string
		profile Profile
		model   string
		parts   string
		want    int64
	}{
		{"two pages", OpenAI, "gpt-4o", pdfPart("application/pdf", catalog, page, page2), 2 * gpt4o},
		{"two pages on claude", Anthropic, "claude-sonnet-4-5", pdfPart("application/pdf", catalog, page, page2), 2 * (3000 + 1600)},
		{"two pages on groq", Groq, "llama-4-scout", pdfPart("application/pdf", catalog, page, page2), 2 * (3000 + 5000)},
		{"the media type is not needed", OpenAI, "gpt-4o", pdfPart("application/octet-stream", catalog, page), gpt4o},
		{"pages in an object stream, names escaped", OpenAI, "gpt-4o",
			pdfPart("application/pdf", catalog, objectStream(t, "<</Type/Page/Parent 2 0 R>>", "<</Type /P#61ge>>", "<</T#79pe/Page>>", "<</Type/Pages>>")), 3 * gpt4o},
		{"/Pages, /Pagex and /Type (x) /Page are no pages", OpenAI, "gpt-4o",
			pdfPart("application/pdf", catalog, page, "<</Type/Pagex>> <</Type (x) /Page>> <</Type/Page#>>"), gpt4o},
		{"no page found: 100 pages", OpenAI, "gpt-4o", pdfPart("application/pdf", catalog), 100 * gpt4o},
		{"a broken stream is skipped", OpenAI, "gpt-4o",
			pdfPart("application/pdf", catalog, page, "8 0 obj\n<<>>\nstream\n\x78\x9cnot deflate\nendstream\nendobj"), gpt4o},
		{"a stream never ended", OpenAI, "gpt-4o", pdfPart("application/pdf", catalog, page, "8 0 obj\n<<>>\nstream\n\x78\x9c"), gpt4o},
		{"a text file", OpenAI, "gpt-4o",
			`[{"type":"file","file":{"file_data":"` + dataURL("text/plain", []byte("hello world")) + `"}}]`, 2},
		{"bare base64", OpenAI, "gpt-4o",
			`[{"type":"file","file":{"file_data":"` + base64.StdEncoding.EncodeToString([]byte("hello world")) + `"}}]`, 2},
		{"a binary file: a token a byte", OpenAI, "gpt-4o",
			`[{"type":"file","file":{"file_data":"` + dataURL("application/zip", bytes.Repeat([]byte{0xff, 0xfe}, 500)) + `"}}]`, 1000},
		{"not base64: 100 pages", OpenAI, "gpt-4o", `[{"type":"file","file":{"file_data":"%%% not base64 %%%"}}]`, 100 * gpt4o},
		{"a data URL that is not base64: 100 pages", OpenAI, "gpt-4o", `[{"type":"file","file":{"file_data":"data:text/plain,hello"}}]`, 100 * gpt4o},
	}
	for _, tt := range tests {
		if got := priceParts(t, tt.profile, tt.model, tt.parts); got != tt.want {
			t.Errorf("%s: %d tokens, want %d", tt.name, got, tt.want)
		}
	}
}

// TestMediaInflateBound: a PDF whose streams inflate past the bound is
// priced at 100 pages, and the bound is the request's, not each file's:
// the second of two PDFs that each inflate most of it is priced at 100
// pages.
func TestMediaInflateBound(t *testing.T) {
	t.Parallel()
	const budget = 256 << 10
	inflating := func(n int) string {
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(bytes.Repeat([]byte{' '}, n))
		zw.Close()
		return pdfPart("application/pdf", "3 0 obj\n<</Type/Page>>\nendobj", "8 0 obj\n<</Filter/FlateDecode>>\nstream\n"+z.String()+"\nendstream\nendobj")
	}
	const page = 3000 + 1445
	if got := priceInflating(t, OpenAI, "gpt-4o", inflating(budget), budget); got != page {
		t.Errorf("a PDF that inflates to the bound: %d tokens, want %d", got, page)
	}
	if got := priceInflating(t, OpenAI, "gpt-4o", inflating(budget+1), budget); got != 100*page {
		t.Errorf("a PDF that inflates past the bound: %d tokens, want %d", got, 100*page)
	}
	one := inflating(budget * 3 / 4)
	two := one[:len(one)-1] + "," + one[1:]
	if got := priceInflating(t, OpenAI, "gpt-4o", two, budget); got != 101*page {
		t.Errorf("two PDFs: %d tokens, want %d", got, 101*page)
	}
}

// TestPromptTokensPricesMedia: the estimate of a request is its text plus
// its parts, at the configured profile's prices, and the cache keeps the
// counts of requests that differ only in their parts or their model's
// prices apart.
func TestPromptTokensPricesMedia(t *testing.T) {
	t.Parallel()
	png300 := dataURL("image/png", encodedImage(t, "png", 300, 200))
	body := func(model, detail string) []byte {
		return []byte(`{"model":"` + model + `","messages":[{"role":"user","content":[{"type":"text","text":"What is in these images?"},` +
			imagePart(png300, "high") + `,` + imagePart("https://example.com/a.png", detail) + `]}]}`)
	}
	openai, err := NewEstimator(EstimatorConfig{Profile: OpenAI})
	if err != nil {
		t.Fatal(err)
	}
	var none Estimator
	for _, tc := range []struct {
		e      *Estimator
		model  string
		detail string
		images int64
	}{
		{openai, "gpt-4o", "low", 255 + 85},
		{openai, "gpt-4o", "high", 255 + 1445},
		{openai, "gpt-4o-mini", "low", 2833 + 5667 + 2833},
		{openai, "gpt-4o", "low", 255 + 85}, // from the cache
		{&none, "gpt-4o", "low", 255 + 5000},
	} {
		req, err := DecodeChatRequest(body(tc.model, tc.detail))
		if err != nil {
			t.Fatal(err)
		}
		text := none.PromptTokens(userRequest(tc.model, "What is in these images?"))
		if got, want := tc.e.PromptTokens(req), text+tc.images; got != want {
			t.Errorf("%s %s: PromptTokens = %d, want %d (text %d and images %d)", tc.model, tc.detail, got, want, text, tc.images)
		}
	}
	if _, err := NewEstimator(EstimatorConfig{Profile: "gemini"}); err == nil || !strings.Contains(err.Error(), `"gemini"`) {
		t.Errorf("an unknown profile: %v", err)
	}
}

// manyImages is a request of n image parts by URL at the given detail.
func manyImages(model string, n int, detail string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"` + model + `","messages":[{"role":"user","content":[{"type":"text","text":"Describe each."}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"type":"image_url","image_url":{"url":"https://img.example/%d.png","detail":%q}}`, i, detail)
	}
	b.WriteString(`]}]}`)
	return []byte(b.String())
}

// TestManyImagesNeverFit: 20,000 images, 1.7 MB of JSON, are priced at 85
// tokens each at the least on the openai profile, so a caller that prices
// its requests, as sluice's engine and gateway do, refuses them before they
// are sent: they can never fit a TPM of 30,000. A request with one image is
// sent.
func TestManyImagesNeverFit(t *testing.T) {
	t.Parallel()
	srv, rec := newServer(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(completionBody))
	})
	client := newTestClient(t, Config{BaseURL: srv.URL, Profile: OpenAI, DefaultMaxTokens: 100})
	est, err := NewEstimator(EstimatorConfig{Profile: client.Profile()})
	if err != nil {
		t.Fatal(err)
	}
	gov, err := governor.New(governor.Config{Key: "openai/gpt-4o", Limits: governor.Limits{governor.TPM: 30_000}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(body []byte) (governor.Cost, error) {
		req, err := DecodeChatRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		if req, err = client.ApplyDefaults(req); err != nil {
			t.Fatal(err)
		}
		cost := est.Cost(req)
		if err := gov.Check(cost); err != nil {
			return cost, err
		}
		_, err = client.Chat(t.Context(), req)
		return cost, err
	}

	if cost, err := send(manyImages("gpt-4o", 1, "low")); err != nil || cost.Input < 85 {
		t.Fatalf("one image: cost %+v, %v", cost, err)
	}
	if n := rec.count.Load(); n != 1 {
		t.Fatalf("one image: the provider got %d requests, want 1", n)
	}
	body := manyImages("gpt-4o", 20_000, "low")
	if len(body) < 1_500_000 {
		t.Fatalf("the body is %d bytes", len(body))
	}
	cost, err := send(body)
	if cost.Input < 20_000*85 {
		t.Errorf("20,000 low-detail images priced at %d input tokens, want at least %d", cost.Input, 20_000*85)
	}
	if tl, ok := errors.AsType[*governor.TooLargeError](err); !ok || tl.Limit != governor.TPM {
		t.Errorf("20,000 images: %v, want a TPM too-large error", err)
	}
	if n := rec.count.Load(); n != 1 {
		t.Errorf("the provider got %d requests, want only the first", n)
	}
	// At high detail, or on a profile without a documented price, more.
	high, err := DecodeChatRequest(manyImages("gpt-4o", 1000, "high"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Profile{OpenAI, Groq, Anthropic, ""} {
		e, err := NewEstimator(EstimatorConfig{Profile: p})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Cost(high).Input; got < 1000*1445 {
			t.Errorf("profile %q: 1,000 high-detail images priced at %d", p, got)
		}
	}
}

// FuzzMediaTokens: any content parts price without panicking, at no less
// than nothing and the same every time, within what their number and bytes
// can cost.
func FuzzMediaTokens(f *testing.F) {
	f.Add(`[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ","detail":"high"}}]`, uint8(0), "gpt-4o")
	f.Add(`[{"type":"input_audio","input_audio":{"data":"UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="}}]`, uint8(1), "m")
	f.Add(`[{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0xLjQKPDwvVHlwZS9QYWdlPj4="}}]`, uint8(2), "claude-opus-4-7")
	f.Add(`[{"type":"image_url","image_url":"data:image/webp;base64,UklGRgAAAABXRUJQVlA4WAoAAAAAAAAAAAAA"},{"type":"text","text":"x"}]`, uint8(3), "gpt-4.1-nano")
	f.Add(`[{"type":"file","file":{"file_data":"JVBERi0xLjUKc3RyZWFtDQp4nCtJLKrUDwhIzEsFAA/xAwA="}},{"type":7}]`, uint8(0), "o4-mini")
	profiles := []Profile{OpenAI, Anthropic, Groq, ""}
	f.Fuzz(func(t *testing.T, parts string, p uint8, model string) {
		profile := profiles[int(p)%len(profiles)]
		first := newMediaPricer(profile, model).tokens([]byte(parts))
		if again := newMediaPricer(profile, model).tokens([]byte(parts)); again != first {
			t.Fatalf("priced %d, then %d", first, again)
		}
		if first < 0 {
			t.Fatalf("priced %d", first)
		}
		// Each part costs at most 100 pages of 8,000 tokens, but for the
		// pages counted, at most one per 10 bytes read or inflated.
		bound := int64(strings.Count(parts, "{")+1)*maxFilePages*(pageTextTokens+5000) +
			(int64(len(parts))+pdfInflatedBudget)/10*(pageTextTokens+48169) + int64(len(parts))
		if first > bound {
			t.Fatalf("priced %d, over the bound %d", first, bound)
		}
	})
}
