package trafficprofile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"

	jsoniter "github.com/json-iterator/go"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// fastJSON decodes lines with json-iterator in its encoding/json-compatible
// mode: the same audit types and the same answers (their UnmarshalJSON
// methods included), three to five times faster, which is most of the
// profile's time.
var fastJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// Stats count what a read met.
type Stats struct {
	Bytes int64 `json:"bytes"`
	Lines int64 `json:"lines"`
	// Requests are the entries read (one per request that ended).
	Requests int64 `json:"requests"`
	// OtherStages are audit events of a stage that does not end a request
	// (RequestReceived, ResponseStarted): not counted again.
	OtherStages int64 `json:"otherStages"`
	// Malformed are lines that are neither an audit event nor a traffic
	// record; the first is in FirstMalformed.
	Malformed      int64  `json:"malformed"`
	FirstMalformed string `json:"firstMalformed,omitempty"`
}

// chunkBytes is how much of a log one worker decodes at a time.
const chunkBytes = 1 << 20

// maxLine bounds one line: an audit event at level RequestResponse of a
// LIST of every object can be large, but a line beyond this is a file
// that is not a log.
const maxLine = 256 << 20

type chunk struct {
	data []byte
	done chan decoded
}

type decoded struct {
	entries []Entry
	stats   Stats
}

// Read decodes every line of r (audit.k8s.io/v1 Events at any level, or
// the gateway's traffic records, mixed freely) and calls fn with each
// request, in the order of the file. Lines are decoded by up to workers
// goroutines (0: one per CPU); fn runs on the caller's goroutine. name is
// used in errors.
func Read(r io.Reader, name string, workers int, fn func(*Entry)) (Stats, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	work := make(chan *chunk, workers)
	order := make(chan *chunk, workers*2)
	for range workers {
		go func() {
			for c := range work {
				c.done <- decodeChunk(c.data)
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(work)
		readErr <- split(r, func(c *chunk) {
			work <- c
			order <- c
		})
	}()
	var total Stats
	for c := range order {
		d := <-c.done
		for i := range d.entries {
			fn(&d.entries[i])
		}
		total.Bytes += d.stats.Bytes
		total.Lines += d.stats.Lines
		total.Requests += d.stats.Requests
		total.OtherStages += d.stats.OtherStages
		if d.stats.Malformed > 0 && total.FirstMalformed == "" {
			total.FirstMalformed = d.stats.FirstMalformed
		}
		total.Malformed += d.stats.Malformed
	}
	if err := <-readErr; err != nil {
		return total, fmt.Errorf("%s: %w", name, err)
	}
	if total.Lines > 0 && total.Malformed == total.Lines {
		return total, fmt.Errorf("%s: no line is an audit.k8s.io/v1 Event or a gateway traffic record (first: %s)", name, total.FirstMalformed)
	}
	return total, nil
}

// split cuts r into chunks of whole lines, read straight into each
// chunk's buffer: the bytes are copied once, only a chunk's last partial
// line twice.
func split(r io.Reader, emit func(*chunk)) error {
	var carry []byte
	for {
		size := max(chunkBytes, 2*len(carry))
		if len(carry) > maxLine {
			return fmt.Errorf("a line is longer than %d MiB: not a log", maxLine>>20)
		}
		buf := make([]byte, size)
		n := copy(buf, carry)
		m, err := io.ReadFull(r, buf[n:])
		buf = buf[:n+m]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if len(buf) > 0 {
				emit(&chunk{data: buf, done: make(chan decoded, 1)})
			}
			return nil
		}
		if err != nil {
			return err
		}
		last := bytes.LastIndexByte(buf, '\n')
		if last < 0 {
			carry = buf // one line longer than the buffer: read on
			continue
		}
		carry = buf[last+1:]
		emit(&chunk{data: buf[:last+1], done: make(chan decoded, 1)})
	}
}

var (
	auditPrefix   = []byte(`"kind":"Event"`)
	trafficPrefix = []byte(`"kind":"` + trafficlog.Kind + `"`)
)

func decodeChunk(data []byte) decoded {
	// Audit lines are rarely under 600 bytes.
	d := decoded{stats: Stats{Bytes: int64(len(data))}, entries: make([]Entry, 0, len(data)/600+1)}
	var ev auditv1.Event
	var rec trafficlog.Record
	sc := newScanner()
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		d.stats.Lines++
		head := line[:min(len(line), 64)]
		var e Entry
		switch {
		case bytes.Contains(head, trafficPrefix):
			rec = trafficlog.Record{}
			if err := fastJSON.Unmarshal(line, &rec); err != nil {
				d.malformed(line, err)
				continue
			}
			fromRecord(&rec, &e)
		default:
			if sc.event(line, &ev) != nil {
				ev = auditv1.Event{}
				if err := fastJSON.Unmarshal(line, &ev); err != nil {
					d.malformed(line, err)
					continue
				}
			}
			if ev.Kind != "Event" && !bytes.Contains(head, auditPrefix) {
				d.malformed(line, nil)
				continue
			}
			if !fromAudit(&ev, &e) {
				d.stats.OtherStages++
				continue
			}
		}
		d.stats.Requests++
		d.entries = append(d.entries, e)
	}
	return d
}

func (d *decoded) malformed(line []byte, err error) {
	if d.stats.Malformed == 0 {
		s := string(line[:min(len(line), 80)])
		if err != nil {
			s += ": " + err.Error()
		}
		d.stats.FirstMalformed = s
	}
	d.stats.Malformed++
}

// countItems counts the items of a LIST's answer ({"items":[...]})
// without decoding them; -1 when it has none.
func countItems(raw []byte) int64 {
	it := jsoniter.ConfigFastest.BorrowIterator(raw)
	defer jsoniter.ConfigFastest.ReturnIterator(it)
	n := int64(-1)
	for field := it.ReadObject(); field != ""; field = it.ReadObject() {
		if field != "items" {
			it.Skip()
			continue
		}
		n = 0
		for it.ReadArray() {
			it.Skip()
			n++
		}
	}
	if it.Error != nil && it.Error != io.EOF {
		return -1
	}
	return n
}
