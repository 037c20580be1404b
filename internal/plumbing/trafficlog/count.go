package trafficlog

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"strings"
	"sync"
)

// Counter counts the objects of a response body while it streams to the
// client, in constant memory: the items of a LIST's page and the events
// of a watch. It never holds the body and never fails the response: a
// body it cannot read (another format, malformed, cut) is uncounted (-1).
//
// What it reads, by Content-Type:
//
//   - application/json: a LIST's top-level "items" array (or "rows", for
//     kubectl's Table answers), a watch's top-level objects (one per
//     event);
//   - application/vnd.kubernetes.protobuf: a LIST's repeated field 2
//     (items) of the list inside the runtime.Unknown envelope, read as
//     protobuf wire format; a watch's length-prefixed frames;
//   - anything else (YAML, CBOR) is uncounted.
//
// A gzip-encoded body (kube-apiserver compresses LISTs over 128 KiB for
// clients that accept it) is inflated on the side as it passes.
type Counter struct {
	mode  countMode
	json  jsonCount
	proto protoCount
	frame frameCount
	gz    *inflater
	// gzBad: the gzip stream did not inflate.
	gzBad bool
}

type countMode uint8

const (
	countNone countMode = iota
	countListJSON
	countWatchJSON
	countListProto
	countWatchProto
)

// Start readies the counter for a body: of a watch or a LIST, with the
// answer's Content-Type and Content-Encoding.
func (c *Counter) Start(watch bool, contentType, contentEncoding string) {
	*c = Counter{}
	mt, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(mt) {
	case "application/json":
		c.mode = countListJSON
		if watch {
			c.mode = countWatchJSON
		}
	case "application/vnd.kubernetes.protobuf":
		c.mode = countListProto
		if watch {
			c.mode = countWatchProto
		}
	default:
		return
	}
	c.json.stream = watch
	switch strings.TrimSpace(contentEncoding) {
	case "", "identity":
	case "gzip":
		c.gz = newInflater(c.write)
	default:
		c.mode = countNone
	}
}

// Write counts what p holds; p is not kept.
func (c *Counter) Write(p []byte) {
	if c.gz != nil {
		c.gz.write(p)
		return
	}
	c.write(p)
}

func (c *Counter) write(p []byte) {
	switch c.mode {
	case countListJSON, countWatchJSON:
		c.json.write(p)
	case countListProto:
		c.proto.write(p)
	case countWatchProto:
		c.frame.write(p)
	}
}

// End is called when the body is complete (or cut); Objects is final
// then.
func (c *Counter) End() {
	if c.gz != nil {
		c.gzBad = !c.gz.end()
		c.gz = nil
	}
}

// Objects is the count: a LIST's items, a watch's events; -1 when the
// body was not counted or could not be read.
func (c *Counter) Objects() int64 {
	if c.gzBad {
		return -1
	}
	switch c.mode {
	case countListJSON, countWatchJSON:
		return c.json.result()
	case countListProto:
		return c.proto.result()
	case countWatchProto:
		return c.frame.n
	}
	return -1
}

// jsonCount is a JSON tokenizer that knows only depth, strings and the
// keys of the top-level object.
type jsonCount struct {
	// stream: count the objects at depth 0 (watch events); otherwise the
	// values of the last top-level "items" or "rows" array.
	stream bool
	depth  int
	// topObject: the top-level value is an object; expectKey: the next
	// string at depth 1 is a key; afterColon: the next value at depth 1
	// is a member's value; member: that member is items or rows.
	topObject, expectKey, afterColon, member bool
	// inString and escape track strings across writes; inKey captures a
	// depth-1 key (up to len(key) bytes; keyLong when longer).
	inString, escape, inKey, keyLong, keyEscaped bool
	key                                          [32]byte
	keyLen                                       int
	// inItems: inside the counted array at depth 2; expectValue: the next
	// token there starts an item.
	inItems, expectValue bool
	found                bool
	n                    int64
	bad                  bool
}

func (j *jsonCount) result() int64 {
	if j.bad || !j.stream && (!j.found || j.depth != 0 || j.inString) {
		return -1
	}
	return j.n
}

func (j *jsonCount) write(p []byte) {
	for i := 0; i < len(p); {
		if j.inString {
			i = j.str(p, i)
			continue
		}
		b := p[i]
		i++
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if j.afterColon && j.depth == 1 {
			// A top-level member's value starts here.
			j.afterColon = false
			if j.member {
				j.found, j.n = b == '[', 0
				j.inItems, j.expectValue = b == '[', b == '['
				j.member = false
				if b == '[' {
					j.depth++
					continue
				}
			}
		} else if j.inItems && j.depth == 2 && j.expectValue && b != ']' {
			j.n++
			j.expectValue = false
		}
		switch b {
		case '"':
			j.inString = true
			if j.depth == 1 && j.topObject && j.expectKey {
				j.inKey, j.keyLen, j.keyLong, j.keyEscaped = true, 0, false, false
			}
		case '{':
			if j.depth == 0 {
				if j.stream {
					j.n++
				} else {
					j.topObject, j.expectKey = true, true
				}
			}
			j.depth++
		case '[':
			j.depth++
		case '}', ']':
			j.depth--
			if j.depth < 0 {
				j.bad, j.depth = true, 0
			}
			if j.depth == 1 {
				j.inItems = false
			}
		case ':':
			if j.depth == 1 && j.topObject {
				j.afterColon = true
			}
		case ',':
			if j.depth == 1 && j.topObject {
				j.expectKey = true
			} else if j.depth == 2 && j.inItems {
				j.expectValue = true
			}
		}
	}
}

// str reads string bytes from p[i:], returning where to go on.
func (j *jsonCount) str(p []byte, i int) int {
	start := i
	if j.escape {
		j.escape = false
		i++
	}
	for i < len(p) {
		q := bytes.IndexByte(p[i:], '"')
		if q < 0 {
			q = len(p) - i
		}
		if bs := bytes.IndexByte(p[i:i+q], '\\'); bs >= 0 {
			j.keyEscaped = true
			if i+bs+1 >= len(p) {
				j.escape = true
				j.captureKey(p[start:])
				return len(p)
			}
			i += bs + 2
			continue
		}
		if i+q == len(p) {
			j.captureKey(p[start:])
			return len(p)
		}
		j.captureKey(p[start : i+q])
		j.inString = false
		if j.inKey {
			j.inKey, j.expectKey = false, false
			j.member = j.isMember()
		}
		return i + q + 1
	}
	j.captureKey(p[start:])
	return len(p)
}

func (j *jsonCount) captureKey(b []byte) {
	if !j.inKey || j.keyLong {
		return
	}
	if j.keyLen+len(b) > len(j.key) {
		j.keyLong = true
		return
	}
	j.keyLen += copy(j.key[j.keyLen:], b)
}

// isMember says whether the key just read is "items" or "rows", matched
// exactly as Kubernetes' decoders match keys (escapes resolved, case
// kept).
func (j *jsonCount) isMember() bool {
	if j.keyLong {
		return false
	}
	k := j.key[:j.keyLen]
	if j.keyEscaped {
		var s string
		quoted := append(append([]byte{'"'}, k...), '"')
		if json.Unmarshal(quoted, &s) != nil {
			return false
		}
		return s == "items" || s == "rows"
	}
	return string(k) == "items" || string(k) == "rows"
}

// protoMagic starts every protobuf answer of kube-apiserver.
var protoMagic = [4]byte{'k', '8', 's', 0}

// protoCount reads protobuf wire format at two levels: the envelope
// (runtime.Unknown, whose field 2 is the encoded list) and the list
// (whose field 2 is repeated items), skipping every other field.
type protoCount struct {
	magic int
	state protoState
	// v and shift accumulate a varint.
	v     uint64
	shift uint
	field uint64
	// skip is what is left of the field being skipped.
	skip uint64
	// inList is set while reading the list, rawLeft its bytes to go.
	inList  bool
	rawLeft uint64
	found   bool
	n       int64
	// bad: the envelope is malformed; listBad: the last list is (the
	// decoder reads the last envelope field 2 only).
	bad, listBad bool
}

type protoState uint8

const (
	protoTag protoState = iota
	protoLength
	protoVarint
	protoSkip
)

func (c *protoCount) result() int64 {
	if c.bad || c.listBad || !c.found || c.inList && c.rawLeft > 0 || c.state != protoTag || c.shift != 0 {
		return -1
	}
	return c.n
}

func (c *protoCount) write(p []byte) {
	for c.magic < len(protoMagic) && len(p) > 0 {
		if p[0] != protoMagic[c.magic] {
			c.bad = true
		}
		c.magic++
		p = p[1:]
	}
	for len(p) > 0 && !c.bad {
		if c.inList && c.rawLeft == 0 {
			// The list ends here: a field it left unfinished is cut.
			if c.state != protoTag || c.shift != 0 {
				c.fail()
				continue
			}
			c.inList = false
		}
		if c.state == protoSkip {
			k := min(uint64(len(p)), c.skip)
			c.advance(k)
			p = p[k:]
			if c.skip -= k; c.skip == 0 {
				c.state = protoTag
			}
			continue
		}
		b := p[0]
		p = p[1:]
		c.advance(1)
		if c.shift == 63 && b > 1 { // a varint over 64 bits
			c.fail()
			continue
		}
		c.v |= uint64(b&0x7f) << c.shift
		c.shift += 7
		if b&0x80 != 0 {
			continue
		}
		v := c.v
		c.v, c.shift = 0, 0
		c.value(v)
	}
}

// value takes a complete varint: a tag, a length or a skipped value.
func (c *protoCount) value(v uint64) {
	switch c.state {
	case protoVarint:
		c.state = protoTag
	case protoTag:
		c.field = v >> 3
		if c.field == 0 || c.field > math.MaxInt32 {
			c.fail()
			return
		}
		switch v & 7 {
		case 0:
			c.state = protoVarint
		case 1:
			c.skipN(8)
		case 5:
			c.skipN(4)
		case 2:
			c.state = protoLength
		default: // groups are not in Kubernetes' messages
			c.fail()
		}
	case protoLength:
		switch {
		case !c.inList && c.field == 2:
			c.inList, c.rawLeft, c.found, c.n, c.listBad = true, v, true, 0, false
			c.state = protoTag
			if v == 0 {
				c.inList = false
			}
		case c.inList && c.field == 2:
			c.n++
			c.skipN(v)
		default:
			c.skipN(v)
		}
	}
}

func (c *protoCount) skipN(n uint64) {
	if c.inList && n > c.rawLeft {
		c.fail()
		return
	}
	c.state, c.skip = protoSkip, n
	if n == 0 {
		c.state = protoTag
	}
}

// fail marks what is being read as malformed: a list is then skipped to
// its end (a later list may replace it), the envelope is given up.
func (c *protoCount) fail() {
	c.v, c.shift = 0, 0
	if !c.inList {
		c.bad = true
		return
	}
	c.listBad, c.inList = true, false
	c.state, c.skip = protoSkip, c.rawLeft
	if c.skip == 0 {
		c.state = protoTag
	}
}

// advance accounts for k bytes read inside the list.
func (c *protoCount) advance(k uint64) {
	if !c.inList {
		return
	}
	if k > c.rawLeft {
		c.bad = true
		return
	}
	c.rawLeft -= k
}

// frameCount counts the frames of a protobuf watch: each event is a
// 4-byte big-endian length and that many bytes.
type frameCount struct {
	header int
	length uint32
	left   uint32
	n      int64
}

func (f *frameCount) write(p []byte) {
	for len(p) > 0 {
		if f.header < 4 {
			f.length = f.length<<8 | uint32(p[0])
			f.header++
			p = p[1:]
			if f.header == 4 {
				f.left = f.length
				if f.left == 0 {
					f.n++
					f.header, f.length = 0, 0
				}
			}
			continue
		}
		k := min(uint32(len(p)), f.left)
		p = p[k:]
		if f.left -= k; f.left == 0 {
			f.n++
			f.header, f.length = 0, 0
		}
	}
}

// inflater passes a gzip body through gzip.Reader on a goroutine of its
// own (compress/gzip reads; the proxy writes) and counts what comes out.
// Writes block until the reader has taken them, so memory stays that of
// the inflater's window.
type inflater struct {
	pw   *io.PipeWriter
	done sync.WaitGroup
	// ok is set when the stream inflated to its end.
	ok bool
}

func newInflater(count func([]byte)) *inflater {
	pr, pw := io.Pipe()
	f := &inflater{pw: pw}
	f.done.Go(func() {
		zr, err := gzip.NewReader(pr)
		if err == nil {
			buf := make([]byte, 32*1024)
			for {
				n, err := zr.Read(buf)
				count(buf[:n])
				if err != nil {
					f.ok = err == io.EOF
					break
				}
			}
		}
		// Whatever is left (after an error) is drained so that the
		// writer never blocks.
		_, _ = io.Copy(io.Discard, pr)
	})
	return f
}

func (f *inflater) write(p []byte) { _, _ = f.pw.Write(p) }

// end closes the stream and says whether it inflated whole.
func (f *inflater) end() bool {
	_ = f.pw.Close()
	f.done.Wait()
	return f.ok
}
