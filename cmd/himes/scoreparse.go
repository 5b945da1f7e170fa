package main

import "strings"

// decodeScoreLineFast decodes the common shape of a `himes score` line — one
// JSON object whose keys are exactly "prediction", "reference",
// "references" and "context", each given once, with string or list-of-string
// values, and strings without \u escapes or control characters — without
// encoding/json's reflection and its second pass over the line (json.Unmarshal
// was ~2/5 of the command's CPU). It reports false for anything else (an
// unknown or differently cased key, null, another type, a \u escape,
// malformed JSON): the caller then decodes with encoding/json, which keeps
// its semantics and error messages for every such line. When it reports
// true, rec is what json.Unmarshal would have produced.
func decodeScoreLineFast(raw []byte) (rec scoreInput, ok bool) {
	p := jsonScan{b: raw}
	p.space()
	if !p.byte('{') {
		return rec, false
	}
	var seen [4]bool
	p.space()
	if p.byte('}') {
		return rec, p.end()
	}
	for {
		p.space()
		key, ok := p.str()
		if !ok {
			return rec, false
		}
		p.space()
		if !p.byte(':') {
			return rec, false
		}
		p.space()
		k := -1
		switch key {
		case "prediction", "reference":
			v, ok := p.str()
			if !ok {
				return rec, false
			}
			if key == "prediction" {
				k, rec.Prediction = 0, &v
			} else {
				k, rec.Reference = 1, &v
			}
		case "references", "context":
			l, ok := p.strList()
			if !ok {
				return rec, false
			}
			if key == "references" {
				k, rec.References = 2, l
			} else {
				k, rec.Context = 3, l
			}
		default:
			return rec, false
		}
		if seen[k] {
			return rec, false // duplicate keys: leave it to encoding/json
		}
		seen[k] = true
		p.space()
		if p.byte(',') {
			continue
		}
		if p.byte('}') {
			return rec, p.end()
		}
		return rec, false
	}
}

// jsonScan is a cursor over one JSON text for decodeScoreLineFast.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonScan) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *jsonScan) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string: false on a \u escape, a control character or a
// string that does not end.
func (p *jsonScan) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	var sb *strings.Builder // only once an escape is seen
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			var s string
			if sb == nil {
				s = string(p.b[start:p.i])
			} else {
				sb.Write(p.b[start:p.i])
				s = sb.String()
			}
			p.i++
			return s, true
		case c < 0x20:
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", false
			}
			var r byte
			switch p.b[p.i+1] {
			case '"', '\\', '/':
				r = p.b[p.i+1]
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			default: // \u and invalid escapes
				return "", false
			}
			if sb == nil {
				sb = new(strings.Builder)
			}
			sb.Write(p.b[start:p.i])
			sb.WriteByte(r)
			p.i += 2
			start = p.i
		default:
			p.i++
		}
	}
	return "", false
}

// strList reads a list of strings; [] is an empty, non-nil list, as
// encoding/json makes it.
func (p *jsonScan) strList() ([]string, bool) {
	if !p.byte('[') {
		return nil, false
	}
	out := []string{}
	p.space()
	if p.byte(']') {
		return out, true
	}
	for {
		p.space()
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		p.space()
		if p.byte(',') {
			continue
		}
		if p.byte(']') {
			return out, true
		}
		return nil, false
	}
}
