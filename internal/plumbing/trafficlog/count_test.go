package trafficlog

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

const (
	jsonType  = "application/json"
	protoType = "application/vnd.kubernetes.protobuf"
)

// count runs body through a Counter in writes of at most step bytes.
func count(watch bool, contentType, encoding string, body []byte, step int) int64 {
	var c Counter
	c.Start(watch, contentType, encoding)
	for len(body) > 0 {
		k := min(step, len(body))
		c.Write(body[:k])
		body = body[k:]
	}
	c.End()
	return c.Objects()
}

// protoList is a LIST answer as kube-apiserver encodes it: the magic, then
// runtime.Unknown{typeMeta: 1, raw: 2 (the list: metadata 1, items 2),
// contentEncoding 3, contentType 4}.
func protoList(items ...[]byte) []byte {
	var list []byte
	list = protowire.AppendTag(list, 1, protowire.BytesType)
	list = protowire.AppendBytes(list, []byte{0x0a, 0x01, '9'}) // metadata{resourceVersion}
	for _, it := range items {
		list = protowire.AppendTag(list, 2, protowire.BytesType)
		list = protowire.AppendBytes(list, it)
	}
	out := []byte("k8s\x00")
	out = protowire.AppendTag(out, 1, protowire.BytesType)
	out = protowire.AppendBytes(out, []byte{0x0a, 0x02, 'v', '1', 0x12, 0x07, 'P', 'o', 'd', 'L', 'i', 's', 't'})
	out = protowire.AppendTag(out, 2, protowire.BytesType)
	out = protowire.AppendBytes(out, list)
	out = protowire.AppendTag(out, 4, protowire.BytesType)
	out = protowire.AppendString(out, protoType)
	return out
}

func frames(events ...[]byte) []byte {
	var out []byte
	for _, e := range events {
		out = binary.BigEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	return out
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func TestCounterCountsObjectsAsTheyStream(t *testing.T) {
	podList := `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9","remainingItemCount":40},` +
		`"items":[{"metadata":{"name":"a","annotations":{"items":"[1,2]","x":"\"items\":[{},{}]"}},"spec":{"containers":[{},{}]}},` +
		`{"metadata":{"name":"b\\\"}"}},{}]}`
	table := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":[{"name":"Name"},{"name":"Age"}],"rows":[{"cells":["a","1d"]},{"cells":["b","2d"]}]}`
	big := `{"items":[` + strings.Repeat(`{"data":{"k":"`+strings.Repeat("x", 1000)+`"}},`, 999) + `{}]}`
	events := `{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}` + "\n" +
		`{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","labels":{"{":"}"}}}}` + "\n" +
		`{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}` + "\n"
	for _, tc := range []struct {
		name        string
		watch       bool
		contentType string
		body        []byte
		want        int64
	}{
		{"JSON list", false, jsonType + ";charset=utf-8", []byte(podList), 3},
		{"JSON list gzip", false, jsonType, gzipped([]byte(podList)), 3},
		{"1000 items gzip", false, jsonType, gzipped([]byte(big)), 1000},
		{"empty list", false, jsonType, []byte(`{"kind":"ConfigMapList","items":[]}`), 0},
		{"items null", false, jsonType, []byte(`{"kind":"ConfigMapList","items":null}`), -1},
		{"escaped key", false, jsonType, []byte(`{"\u0069tems":[1,"two",null,{}]}`), 4},
		{"other case is another key", false, jsonType, []byte(`{"Items":[1,2],"items":[3]}`), 1},
		{"last items wins", false, jsonType, []byte(`{"items":[1,2],"items":[3]}`), 1},
		{"kubectl's Table", false, jsonType + ";as=Table;v=v1;g=meta.k8s.io", []byte(table), 2},
		{"an error Status", false, jsonType, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":410}`), -1},
		{"cut mid-list", false, jsonType, []byte(podList[:len(podList)/2]), -1},
		{"broken gzip", false, jsonType, append(gzipped([]byte(podList))[:30], 'x'), -1},
		{"YAML is not read", false, "application/yaml", []byte("items:\n- a\n"), -1},
		{"unknown encoding", false, jsonType, []byte(podList), -1},
		{"JSON watch", true, jsonType, []byte(events), 3},
		{"protobuf list", false, protoType, protoList([]byte("a"), []byte{}, bytes.Repeat([]byte("b"), 300)), 3},
		{"protobuf list gzip", false, protoType, gzipped(protoList([]byte("a"), []byte("b"))), 2},
		{"protobuf empty list", false, protoType, protoList(), 0},
		{"protobuf without magic", false, protoType, protoList([]byte("a"))[4:], -1},
		{"protobuf cut", false, protoType, protoList([]byte("a"), []byte("bb"))[:30], -1},
		{"protobuf watch", true, protoType + ";stream=watch", frames([]byte("e1"), []byte{}, bytes.Repeat([]byte("e"), 70000)), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := ""
			if tc.name == "unknown encoding" {
				enc = "br"
			}
			if bytes.HasPrefix(tc.body, []byte{0x1f, 0x8b}) {
				enc = "gzip"
			}
			// Every split of the body into writes counts alike.
			for _, step := range []int{1, 2, 3, 7, 64, 4096, len(tc.body) + 1} {
				if got := count(tc.watch, tc.contentType, enc, tc.body, step); got != tc.want {
					t.Fatalf("in writes of %d bytes: %d objects, want %d", step, got, tc.want)
				}
			}
		})
	}
}

// TestCounterMemoryIsFlat: a LIST of hundreds of megabytes is counted
// without being held: the counter allocates nothing per write.
func TestCounterMemoryIsFlat(t *testing.T) {
	item := []byte(`{"metadata":{"name":"x"},"data":{"k":"` + strings.Repeat("y", 4000) + `"}},`)
	var c Counter
	allocs := testing.AllocsPerRun(1, func() {
		c.Start(false, jsonType, "")
		c.Write([]byte(`{"kind":"List","items":[`))
		for range 50000 { // 200 MB
			c.Write(item)
		}
		c.Write([]byte(`{}]}`))
		c.End()
	})
	if c.Objects() != 50001 || allocs > 10 {
		t.Fatalf("%d objects with %v allocations; want 50001 with none per write", c.Objects(), allocs)
	}
}

// referenceItems is what encoding/json says a valid LIST answer holds:
// the length of its last top-level "items" or "rows" array (keys matched
// exactly), or -1.
func referenceItems(body []byte) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return 0, false
	}
	n := int64(-1)
	if tok != json.Delim('{') {
		var rest any
		if tok == json.Delim('[') {
			if err := json.Unmarshal(body, &rest); err != nil {
				return 0, false
			}
		}
		return -1, true
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return 0, false
		}
		if k != "items" && k != "rows" {
			continue
		}
		var arr []json.RawMessage
		if json.Unmarshal(v, &arr) != nil || arr == nil {
			n = -1
			continue
		}
		n = int64(len(arr))
	}
	if _, err := dec.Token(); err != nil {
		return 0, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, false // more after the object
	}
	return n, true
}

// FuzzListCountMatchesEncodingJSON: for any valid JSON, the streaming
// count of a LIST's items, in any split of writes, is encoding/json's;
// for any input at all, the counter neither panics nor hangs.
func FuzzListCountMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"items":[{},{"a":[1,2]},"x"]}`, `{"\u0069tems":[1]}`, `{"rows":[[],{}],"kind":"Table"}`,
		`{"a":"\\\"items\":[1]","items":[]}`, `[{"items":[1]}]`, `{"items":5}`, `{"items":[1,2],"items":null}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		got := count(false, jsonType, "", body, int(step)+1)
		whole := count(false, jsonType, "", body, len(body)+1)
		if got != whole {
			t.Fatalf("writes of %d bytes count %d, one write %d", int(step)+1, got, whole)
		}
		if !json.Valid(body) {
			return
		}
		if want, ok := referenceItems(body); ok && got != want {
			t.Fatalf("counted %d, encoding/json %d", got, want)
		}
	})
}

// referenceProtoItems is what protowire reads of a protobuf LIST answer:
// the items (field 2) of the last envelope field 2, or -1 when the
// answer is not well-formed.
func referenceProtoItems(body []byte) int64 {
	if !bytes.HasPrefix(body, []byte("k8s\x00")) {
		return -1
	}
	fields := func(b []byte, each func(num protowire.Number, v []byte)) bool {
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if typ == protowire.StartGroupType || typ == protowire.EndGroupType {
				return false
			}
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return false
			}
			if typ == protowire.BytesType {
				v, _ := protowire.ConsumeBytes(b)
				each(num, v)
			}
			b = b[m:]
		}
		return true
	}
	var raw []byte
	found := false
	if !fields(body[4:], func(num protowire.Number, v []byte) {
		if num == 2 {
			raw, found = v, true
		}
	}) || !found {
		return -1
	}
	n := int64(0)
	if !fields(raw, func(num protowire.Number, _ []byte) {
		if num == 2 {
			n++
		}
	}) {
		return -1
	}
	return n
}

// FuzzProtobufListCountMatchesProtowire: the streaming count of a
// protobuf LIST, in any split of writes, is what protowire reads; the
// counter never panics.
func FuzzProtobufListCountMatchesProtowire(f *testing.F) {
	f.Add(protoList([]byte("a"), []byte("bc")), uint8(2))
	f.Add(protoList(), uint8(0))
	f.Add(append(protoList([]byte("a")), 0x08, 0x96, 0x01), uint8(5))
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		got := count(false, protoType, "", body, int(step)+1)
		if want := referenceProtoItems(body); got != want {
			t.Fatalf("counted %d, protowire %d", got, want)
		}
	})
}
