package tbevent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CRC-32C check values from the CRC catalogue ("123456789", "abc") and the
// iSCSI test vectors of RFC 3720 B.4 (32 zero bytes, 32 0xFF bytes); the
// masked values apply TFRecord's mask, ((c>>15)|(c<<17)) + 0xa282ead8,
// computed by hand from those.
func TestMaskedCRCReferenceVectors(t *testing.T) {
	ff := bytes.Repeat([]byte{0xff}, 32)
	for _, c := range []struct {
		in          []byte
		crc, masked uint32
	}{
		{[]byte("123456789"), 0xe3069283, 0xc78ab0e5},
		{[]byte("abc"), 0x364b3fb7, 0x21f1576e},
		{make([]byte, 32), 0x8a9136aa, 0x0fd7fffa},
		{ff, 0x62a8ab43, 0xf909b029},
	} {
		if got := crc32.Checksum(c.in, castagnoli); got != c.crc {
			t.Errorf("crc32c(%q) = %#x, want %#x", c.in, got, c.crc)
		}
		if got := MaskedCRC(c.in); got != c.masked {
			t.Errorf("masked crc32c(%q) = %#x, want %#x", c.in, got, c.masked)
		}
	}
}

func TestRecordFraming(t *testing.T) {
	rec := AppendRecord(nil, []byte("abc"))
	length := []byte{3, 0, 0, 0, 0, 0, 0, 0}
	want := append([]byte{}, length...)
	want = binary.LittleEndian.AppendUint32(want, MaskedCRC(length))
	want = append(want, "abc"...)
	want = append(want, 0x6e, 0x57, 0xf1, 0x21) // 0x21f1576e little endian, from the vector above
	if !bytes.Equal(rec, want) {
		t.Fatalf("record\n got %x\nwant %x", rec, want)
	}
}

// The bytes of a one-scalar event, encoded by hand from event.proto and
// summary.proto: wall_time (field 1, fixed64) 1.0, step (2, varint) 3,
// summary (5, bytes) { value (1, bytes) { tag (1) "a", simple_value (2,
// fixed32) 0.5 } }.
func TestScalarEventBytes(t *testing.T) {
	got := ScalarEvent(time.Unix(1, 0), 3, []Scalar{{"a", 0.5}})
	want, _ := hex.DecodeString("09000000000000f03f" + "1003" + "2a0a" + "0a08" + "0a0161" + "150000003f")
	if !bytes.Equal(got, want) {
		t.Fatalf("event\n got %x\nwant %x", got, want)
	}
	// A negative step is a 10-byte two's complement varint.
	neg := ScalarEvent(time.Unix(0, 0), -1, nil)
	if !bytes.Contains(neg, []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x2a}) {
		t.Fatalf("step -1 encoded as %x", neg)
	}
}

// needTool returns the path of a tool the decoding test needs: skipped with
// the reason locally, a failure under CI=true (scripts/ci/setup-protobuf.sh
// installs them).
func needTool(t *testing.T, name string, probe ...string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil && len(probe) > 0 {
		err = exec.Command(p, probe...).Run()
	}
	if err != nil {
		msg := "SKIP: " + name + " " + strings.Join(probe, " ") + " unavailable (" + err.Error() +
			"): apt-get install protobuf-compiler python3-protobuf (scripts/ci/setup-protobuf.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

type decoded struct {
	File        string  `json:"file"`
	WallTime    float64 `json:"wall_time"`
	Step        int64   `json:"step"`
	What        string  `json:"what"`
	FileVersion string  `json:"file_version"`
	Status      string  `json:"status"`
	Values      []struct {
		Tag       string   `json:"tag"`
		Kind      string   `json:"kind"`
		Value     float64  `json:"value"`
		Dtype     int      `json:"dtype"`
		Rank      int      `json:"rank"`
		Strings   []string `json:"strings"`
		Plugin    string   `json:"plugin"`
		DataClass int      `json:"data_class"`
	} `json:"values"`
}

// decodeWithProtoc compiles TensorBoard's .proto files (testdata/proto) with
// protoc and decodes every events file in dir with Python's protobuf.
func decodeWithProtoc(t *testing.T, dir string) []decoded {
	t.Helper()
	protoc := needTool(t, "protoc", "--version")
	py := needTool(t, "/usr/bin/python3", "-c", "import google.protobuf")
	pb := t.TempDir()
	files, _ := filepath.Glob(filepath.Join("testdata", "proto", "tensorboard", "compat", "proto", "*.proto"))
	out, err := exec.Command(protoc, append([]string{"-I", filepath.Join("testdata", "proto"), "--python_out", pb}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "decode.py"), pb, dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("decode.py: %v\n%s", err, stderr.String())
	}
	var evs []decoded
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var e decoded
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("decode.py output %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

func TestEventsDecodeWithTensorBoardProtos(t *testing.T) {
	dir := t.TempDir()
	wall := time.Date(2026, 1, 2, 3, 4, 5, 250e6, time.UTC)
	r := NewRun(dir)
	if err := r.Begin(0); err != nil {
		t.Fatal(err)
	}
	md := "| q | rewrite |\n|---|---|\n| who? | Ada Lovelace — “née Byron” |\n"
	for _, err := range []error{
		r.Scalars(1, wall, []Scalar{{"step/reward_mean", 0.25}, {"step/terms/em", 1}}),
		r.Scalars(2, wall.Add(time.Second), []Scalar{{"step/reward_mean", -1.5}}),
		r.Text(2, wall, "eval/samples", md),
		r.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A resumed session: a second file starting at step 2.
	r2 := NewRun(dir)
	if err := r2.Begin(2); err != nil {
		t.Fatal(err)
	}
	if err := r2.Scalars(2, wall, []Scalar{{"step/reward_mean", 0.125}}); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}

	evs := decodeWithProtoc(t, dir)
	if len(evs) != 8 {
		t.Fatalf("decoded %d events, want 8: %+v", len(evs), evs)
	}
	if evs[0].What != "file_version" || evs[0].FileVersion != "brain.Event:2" || evs[1].Status != "START" || evs[1].Step != 0 {
		t.Fatalf("file header: %+v %+v", evs[0], evs[1])
	}
	s := evs[2]
	if s.What != "summary" || s.Step != 1 || math.Abs(s.WallTime-float64(wall.UnixNano())/1e9) > 1e-6 || len(s.Values) != 2 ||
		s.Values[0].Tag != "step/reward_mean" || s.Values[0].Kind != "simple_value" || s.Values[0].Value != 0.25 ||
		s.Values[1].Tag != "step/terms/em" || s.Values[1].Value != 1 {
		t.Fatalf("scalars: %+v", s)
	}
	if evs[3].Step != 2 || evs[3].Values[0].Value != -1.5 {
		t.Fatalf("second step: %+v", evs[3])
	}
	tx := evs[4]
	if len(tx.Values) != 1 || tx.Values[0].Kind != "tensor" || tx.Values[0].Dtype != 7 || tx.Values[0].Rank != 0 ||
		tx.Values[0].Plugin != "text" || tx.Values[0].DataClass != 2 || len(tx.Values[0].Strings) != 1 || tx.Values[0].Strings[0] != md {
		t.Fatalf("text: %+v", tx)
	}
	if evs[5].File == evs[4].File || evs[6].Status != "START" || evs[6].Step != 2 || evs[7].Values[0].Value != 0.125 {
		t.Fatalf("resumed session: %+v %+v %+v", evs[5], evs[6], evs[7])
	}
}

// Item 5 of issue 33: an events file cut by a full disk kept its partial
// last record, which resume neither repaired nor reported. A session's file
// is cut inside its last record (in the data, then in the 12-byte header);
// the next session's Begin cuts it back to its four whole records (file
// version, session start, two scalars: each record is 16 bytes of framing
// plus its event) and reports it; a third finds nothing to repair.
func TestBeginRepairsAFileCutMidRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		into   int64 // bytes of the last record left
		reason string
	}{
		{"in the data", 20, "a partial record"},
		{"in the header", 5, "a partial record header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			wall := time.Unix(1700000000, 0)
			r := NewRun(dir)
			if err := r.Begin(0); err != nil {
				t.Fatal(err)
			}
			vals := []Scalar{{"train/reward", 0.5}, {"train/loss", 1.25}}
			for step := 1; step <= 3; step++ {
				if err := r.Scalars(step, wall, vals); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			paths, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
			if len(paths) != 1 || len(r.Repairs()) != 0 {
				t.Fatalf("first session: files %v, repairs %v", paths, r.Repairs())
			}
			fi, err := os.Stat(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			last := int64(16 + len(ScalarEvent(wall, 3, vals)))
			wantKept := fi.Size() - last
			cutAt := wantKept + tc.into
			if err := os.Truncate(paths[0], cutAt); err != nil {
				t.Fatal(err)
			}
			r2 := NewRun(dir)
			if err := r2.Begin(3); err != nil {
				t.Fatal(err)
			}
			reps := r2.Repairs()
			if len(reps) != 1 {
				t.Fatalf("repairs %v, want one", reps)
			}
			got := reps[0]
			if got.Path != paths[0] || got.Size != cutAt || got.Kept != wantKept || got.Records != 4 || got.Reason != tc.reason {
				t.Fatalf("repair %+v, want path %s size %d kept %d records 4 (%s)", got, paths[0], cutAt, wantKept, tc.reason)
			}
			if fi, err := os.Stat(paths[0]); err != nil || fi.Size() != wantKept {
				t.Fatalf("the cut file: %v (%v), want %d bytes", fi, err, wantKept)
			}
			if err := r2.Close(); err != nil {
				t.Fatal(err)
			}
			r3 := NewRun(dir)
			if err := r3.Begin(4); err != nil {
				t.Fatal(err)
			}
			defer r3.Close()
			if len(r3.Repairs()) != 0 {
				t.Fatalf("whole files were repaired: %v", r3.Repairs())
			}
		})
	}
}
