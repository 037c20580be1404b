package trafficprofile

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"k8s.io/apimachinery/pkg/runtime"
)

// scanner fills the fields of an audit event that a profile reads and
// skips the rest (annotations, extra, source IPs, request bodies) without
// decoding them. It exists for speed alone: a reflective decoder spends
// most of a profile's time building maps and strings nobody reads, and
// the profile must run at many times jq's speed on logs of gigabytes.
// TestScannerAgreesWithTheDecoder holds it to encoding/json's answers on
// real audit lines; a line it cannot read goes to the full decoder.
type scanner struct {
	buf []byte
	pos int
	// strs interns the strings of a worker's lines (users, agents, verbs,
	// resources repeat endlessly), so that a line allocates nearly nothing.
	strs   map[string]string
	groups map[string][]string
	// ref and status are reused: an event read is consumed (copied into
	// an Entry) before the next is read.
	ref    auditv1.ObjectReference
	status metav1.Status
}

var errSyntax = errors.New("not the JSON of an audit event")

func newScanner() *scanner {
	return &scanner{strs: map[string]string{}, groups: map[string][]string{}}
}

// event reads line into ev (reset first).
func (s *scanner) event(line []byte, ev *auditv1.Event) error {
	*ev = auditv1.Event{}
	s.buf, s.pos = line, 0
	return s.object(func(key []byte) error {
		switch string(key) {
		case "kind":
			v, err := s.str()
			ev.Kind = v
			return err
		case "stage":
			v, err := s.str()
			ev.Stage = auditv1.Stage(v)
			return err
		case "requestURI":
			v, err := s.rawStr()
			ev.RequestURI = v
			return err
		case "verb":
			v, err := s.str()
			ev.Verb = v
			return err
		case "userAgent":
			v, err := s.str()
			ev.UserAgent = v
			return err
		case "user":
			if s.null() {
				return nil
			}
			return s.user(&ev.User)
		case "impersonatedUser":
			if s.null() {
				return nil
			}
			ev.ImpersonatedUser = &authenticationv1.UserInfo{}
			return s.user(ev.ImpersonatedUser)
		case "objectRef":
			if s.null() {
				return nil
			}
			s.ref = auditv1.ObjectReference{}
			ref := &s.ref
			ev.ObjectRef = ref
			return s.object(func(key []byte) error {
				var err error
				switch string(key) {
				case "resource":
					ref.Resource, err = s.str()
				case "namespace":
					ref.Namespace, err = s.str()
				case "name":
					ref.Name, err = s.rawStr()
				case "apiGroup":
					ref.APIGroup, err = s.str()
				case "apiVersion":
					ref.APIVersion, err = s.str()
				case "subresource":
					ref.Subresource, err = s.str()
				default:
					err = s.skip()
				}
				return err
			})
		case "responseStatus":
			if s.null() {
				return nil
			}
			s.status = metav1.Status{}
			st := &s.status
			ev.ResponseStatus = st
			return s.object(func(key []byte) error {
				if string(key) != "code" {
					return s.skip()
				}
				start := s.pos
				if err := s.skip(); err != nil {
					return err
				}
				n, err := strconv.ParseInt(string(bytes.TrimSpace(s.buf[start:s.pos])), 10, 32)
				st.Code = int32(n)
				return err
			})
		case "responseObject":
			if s.null() {
				return nil
			}
			start := s.ws()
			if err := s.skip(); err != nil {
				return err
			}
			ev.ResponseObject = &runtime.Unknown{Raw: s.buf[start:s.pos]}
			return nil
		case "requestReceivedTimestamp":
			t, err := s.time()
			ev.RequestReceivedTimestamp = metav1.NewMicroTime(t)
			return err
		case "stageTimestamp":
			t, err := s.time()
			ev.StageTimestamp = metav1.NewMicroTime(t)
			return err
		}
		return s.skip()
	})
}

// user reads a user's name and groups.
func (s *scanner) user(u *authenticationv1.UserInfo) error {
	return s.object(func(key []byte) error {
		switch string(key) {
		case "username":
			v, err := s.str()
			u.Username = v
			return err
		case "groups":
			if s.null() {
				return nil
			}
			v, err := s.strings()
			u.Groups = v
			return err
		}
		return s.skip()
	})
}

// null consumes a null value and says whether there was one.
func (s *scanner) null() bool {
	if s.ws()+4 <= len(s.buf) && string(s.buf[s.pos:s.pos+4]) == "null" {
		s.pos += 4
		return true
	}
	return false
}

// ws skips white space and returns the position.
func (s *scanner) ws() int {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.pos++
		default:
			return s.pos
		}
	}
	return s.pos
}

func (s *scanner) expect(c byte) error {
	if s.ws() >= len(s.buf) || s.buf[s.pos] != c {
		return errSyntax
	}
	s.pos++
	return nil
}

// fieldsRead are the keys the scanner reads, at any depth; foldedFieldsRead
// the same in lower case.
var fieldsRead, foldedFieldsRead = func() (map[string]bool, map[string]bool) {
	m, f := map[string]bool{}, map[string]bool{}
	for _, k := range []string{"apiGroup", "apiVersion", "code", "groups", "impersonatedUser", "kind", "name", "namespace",
		"objectRef", "requestReceivedTimestamp", "requestURI", "resource", "responseObject",
		"responseStatus", "stage", "stageTimestamp", "subresource", "user", "userAgent", "username", "verb"} {
		m[k], f[strings.ToLower(k)] = true, true
	}
	return m, f
}()

// foldsToAFieldRead says whether key differs from a key the scanner reads
// only by case (Unicode simple folding, as encoding/json compares keys).
// Most keys are ASCII and are looked up lower-cased; a key with other
// bytes ("K", the Kelvin sign, folds to "k") is compared in full.
func foldsToAFieldRead(key []byte) bool {
	if fieldsRead[string(key)] {
		return false
	}
	var lower [32]byte
	if len(key) > len(lower) {
		return false // longer than any key read
	}
	for i, c := range key {
		switch {
		case c >= utf8.RuneSelf:
			for k := range fieldsRead {
				if bytes.EqualFold(key, []byte(k)) {
					return true
				}
			}
			return false
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	return foldedFieldsRead[string(lower[:len(key)])]
}

// object calls field for each key, positioned at its value, which field
// must consume.
func (s *scanner) object(field func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.ws() < len(s.buf) && s.buf[s.pos] == '}' {
		s.pos++
		return nil
	}
	for {
		key, esc, err := s.strBytes()
		if err != nil {
			return err
		}
		if esc || foldsToAFieldRead(key) {
			// Keys of audit events are never escaped, and encoding/json
			// matches keys without regard to case ("RequestURI" fills
			// RequestURI): such a line goes to the full decoder.
			return errSyntax
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		if s.ws() >= len(s.buf) {
			return errSyntax
		}
		switch s.buf[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return errSyntax
		}
	}
}

// strBytes reads a string's raw bytes (between the quotes) and says
// whether it holds escapes.
func (s *scanner) strBytes() ([]byte, bool, error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start, esc := s.pos, false
	for {
		i := bytes.IndexByte(s.buf[s.pos:], '"')
		if i < 0 {
			return nil, false, errSyntax
		}
		s.pos += i + 1
		// The quote ends the string unless an odd number of backslashes
		// escapes it.
		n := 0
		for j := s.pos - 2; j >= start && s.buf[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			esc = true
			continue
		}
		if !esc && bytes.IndexByte(s.buf[start:s.pos-1], '\\') >= 0 {
			esc = true
		}
		if !esc && !utf8.Valid(s.buf[start:s.pos-1]) {
			// encoding/json reads each invalid byte as U+FFFD; leave
			// such a line to it, so that both read the same string.
			return nil, false, errSyntax
		}
		return s.buf[start : s.pos-1], esc, nil
	}
}

// str reads a string value, interned; null reads as "".
func (s *scanner) str() (string, error) {
	if s.null() {
		return "", nil
	}
	raw, esc, err := s.strBytes()
	if err != nil {
		return "", err
	}
	if esc {
		return unescape(raw)
	}
	if v, ok := s.strs[string(raw)]; ok {
		return v, nil
	}
	if len(s.strs) > 1<<16 {
		clear(s.strs)
	}
	v := string(raw)
	s.strs[v] = v
	return v, nil
}

// rawStr reads a string value that rarely repeats (URIs, names): not
// interned.
func (s *scanner) rawStr() (string, error) {
	raw, esc, err := s.strBytes()
	if err != nil {
		return "", err
	}
	if esc {
		return unescape(raw)
	}
	return string(raw), nil
}

func unescape(raw []byte) (string, error) {
	v, err := strconv.Unquote(`"` + string(raw) + `"`)
	if err != nil || !utf8.ValidString(v) {
		return "", errSyntax // JSON escapes Go does not read (\/): the full decoder will
	}
	return v, nil
}

// strings reads an array of strings, interned as a whole.
func (s *scanner) strings() ([]string, error) {
	start := s.ws()
	if err := s.skip(); err != nil {
		return nil, err
	}
	raw := s.buf[start:s.pos]
	if v, ok := s.groups[string(raw)]; ok {
		return v, nil
	}
	end := s.pos
	s.pos = start
	out := []string{} // as encoding/json reads [], not nil
	if err := s.expect('['); err != nil {
		return nil, err
	}
	for s.ws() < end && s.buf[s.pos] != ']' {
		v, err := s.str()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if s.ws() < end && s.buf[s.pos] == ',' {
			s.pos++
		}
	}
	s.pos = end
	if len(s.groups) > 1<<14 {
		clear(s.groups)
	}
	s.groups[string(raw)] = out
	return out, nil
}

// skip passes over one value of any kind.
func (s *scanner) skip() error {
	if s.ws() >= len(s.buf) {
		return errSyntax
	}
	switch s.buf[s.pos] {
	case '"':
		_, _, err := s.strBytes()
		return err
	case '{', '[':
		depth := 0
		for s.pos < len(s.buf) {
			switch s.buf[s.pos] {
			case '"':
				if _, _, err := s.strBytes(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return nil
				}
			}
			s.pos++
		}
		return errSyntax
	}
	// A number, true, false or null.
	start := s.pos
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if s.pos == start {
				return errSyntax
			}
			return nil
		}
		s.pos++
	}
	return errSyntax
}

// time reads an RFC 3339 timestamp; kube-apiserver writes them in UTC
// with microseconds (2026-11-23T20:48:56.478920Z), read here without
// time.Parse's generality.
func (s *scanner) time() (time.Time, error) {
	if s.null() {
		return time.Time{}, nil
	}
	raw, _, err := s.strBytes()
	if err != nil {
		return time.Time{}, err
	}
	if t, ok := fastUTC(raw); ok {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, string(raw))
	if err != nil {
		return time.Time{}, errSyntax
	}
	return t, nil
}

func fastUTC(b []byte) (time.Time, bool) {
	if len(b) < 20 || b[len(b)-1] != 'Z' || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(b[0:4])
	month, ok2 := num(b[5:7])
	day, ok3 := num(b[8:10])
	hour, ok4 := num(b[11:13])
	minute, ok5 := num(b[14:16])
	sec, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, false
	}
	nsec := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) > 10 {
			return time.Time{}, false
		}
		n, ok := num(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for range 9 - (len(frac) - 1) {
			n *= 10
		}
		nsec = n
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}
