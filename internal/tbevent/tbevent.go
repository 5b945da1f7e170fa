// Package tbevent writes TensorBoard event files (events.out.tfevents.*):
// TFRecord framing around hand-encoded tensorboard.Event protocol buffers,
// scalars as simple_value summaries and Markdown as text-plugin tensors, so
// TensorBoard (and `wandb sync --sync-tensorboard`) read a run without the
// project depending on TensorFlow or a protobuf runtime.
//
// The messages and field numbers are those of tensorboard/compat/proto
// (event.proto, summary.proto, tensor.proto, tensor_shape.proto,
// types.proto); testdata/proto holds the subset used here, which the tests
// compile with protoc to decode what this package writes.
package tbevent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"
)

// FileVersion is the first event of every file (event.proto: "brain.Event:2").
const FileVersion = "brain.Event:2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC-32C: the checksum rotated right by 15
// bits plus 0xa282ead8, so a CRC over data that itself holds CRCs is not
// degenerate.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// AppendRecord appends one TFRecord: uint64 length (little endian), masked
// CRC of the length bytes, the data, masked CRC of the data.
func AppendRecord(dst, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	dst = append(dst, n[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(n[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Protocol buffer wire format: a field is a varint key (number<<3 | wire
// type) followed by a varint, 8 or 4 little-endian bytes, or a
// length-prefixed byte string (strings and embedded messages).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

type msg []byte

func (m msg) key(field, wire int) msg { return binary.AppendUvarint(m, uint64(field<<3|wire)) }

func (m msg) varint(field int, v uint64) msg {
	return binary.AppendUvarint(m.key(field, wireVarint), v)
}

func (m msg) double(field int, v float64) msg {
	return binary.LittleEndian.AppendUint64(m.key(field, wireFixed64), math.Float64bits(v))
}

func (m msg) float(field int, v float32) msg {
	return binary.LittleEndian.AppendUint32(m.key(field, wireFixed32), math.Float32bits(v))
}

func (m msg) bytes(field int, b []byte) msg {
	m = binary.AppendUvarint(m.key(field, wireBytes), uint64(len(b)))
	return append(m, b...)
}

func (m msg) str(field int, s string) msg { return m.bytes(field, []byte(s)) }

// Field numbers (tensorboard/compat/proto).
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	eventSessionLog  = 7 // SessionLog

	sessionLogStatus = 1 // SessionStatus
	sessionStart     = 1 // SessionLog.START

	summaryValue = 1 // repeated Value

	valueTag         = 1 // string
	valueSimpleValue = 2 // float
	valueTensor      = 8 // TensorProto
	valueMetadata    = 9 // SummaryMetadata

	metadataPluginData = 1 // PluginData
	metadataDataClass  = 4 // DataClass
	pluginName         = 1 // string
	dataClassTensor    = 2 // DATA_CLASS_TENSOR

	tensorDtype     = 1 // DataType
	tensorShape     = 2 // TensorShapeProto (empty: a scalar)
	tensorStringVal = 8 // repeated bytes
	dtString        = 7 // DT_STRING
)

func event(wall time.Time, step int64) msg {
	var m msg
	m = m.double(eventWallTime, float64(wall.UnixNano())/1e9)
	if step != 0 {
		m = m.varint(eventStep, uint64(step)) // int64: two's complement varint
	}
	return m
}

// Scalar is a tag and its value.
type Scalar struct {
	Tag   string
	Value float64
}

// ScalarEvent encodes an Event whose Summary holds one simple_value per
// scalar (float32, as TensorBoard stores them).
func ScalarEvent(wall time.Time, step int64, values []Scalar) []byte {
	var sum msg
	for _, v := range values {
		var val msg
		val = val.str(valueTag, v.Tag).float(valueSimpleValue, float32(v.Value))
		sum = sum.bytes(summaryValue, val)
	}
	return event(wall, step).bytes(eventSummary, sum)
}

// TextEvent encodes an Event with a text-plugin summary: a scalar DT_STRING
// tensor holding Markdown, which TensorBoard's Text tab renders.
func TextEvent(wall time.Time, step int64, tag, markdown string) []byte {
	var plugin, meta, tensor, val msg
	plugin = plugin.str(pluginName, "text")
	meta = meta.bytes(metadataPluginData, plugin).varint(metadataDataClass, dataClassTensor)
	tensor = tensor.varint(tensorDtype, dtString).bytes(tensorShape, nil).str(tensorStringVal, markdown)
	val = val.str(valueTag, tag).bytes(valueMetadata, meta).bytes(valueTensor, tensor)
	var sum msg
	sum = sum.bytes(summaryValue, val)
	return event(wall, step).bytes(eventSummary, sum)
}

// FileVersionEvent is the event that opens a file.
func FileVersionEvent(wall time.Time) []byte {
	return event(wall, 0).str(eventFileVersion, FileVersion)
}

// StartEvent is a SessionLog START at step: TensorBoard drops the events an
// earlier session wrote at steps ≥ step (the steps a resumed run redoes).
func StartEvent(wall time.Time, step int64) []byte {
	var sl msg
	sl = sl.varint(sessionLogStatus, sessionStart)
	return event(wall, step).bytes(eventSessionLog, sl)
}

// Writer appends events to one new events file in a directory.
type Writer struct {
	f    *os.File
	w    *bufio.Writer
	path string
	buf  []byte
}

// Create opens a new events file in dir (created if needed), named as
// TensorBoard expects (events.out.tfevents.<unix time>.<host>...), and
// writes the file_version event.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var f *os.File
	var path string
	for i := 0; ; i++ {
		path = filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", now.Unix(), host, os.Getpid(), i))
		f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
	}
	w := &Writer{f: f, w: bufio.NewWriterSize(f, 64<<10), path: path}
	if err := w.Write(FileVersionEvent(now)); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Path is the events file.
func (w *Writer) Path() string { return w.path }

// Write appends one encoded event as a TFRecord.
func (w *Writer) Write(event []byte) error {
	w.buf = AppendRecord(w.buf[:0], event)
	if _, err := w.w.Write(w.buf); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	return nil
}

// Flush writes buffered events and syncs the file.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", w.path, err)
	}
	return nil
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.Flush()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", w.path, cerr)
	}
	return err
}

// Run writes a training run's events into one directory, a new file per
// session (a resumed run adds a file; TensorBoard reads them in order).
type Run struct {
	dir     string
	w       *Writer
	repairs []Repair
}

// Repairs lists the earlier files the last Begin cut back to their last
// whole record.
func (r *Run) Repairs() []Repair { return r.repairs }

// NewRun returns a Run writing into dir; nothing is created before Begin.
func NewRun(dir string) *Run { return &Run{dir: dir} }

// Begin opens the session's file and marks a session start at firstStep,
// so TensorBoard drops what an interrupted session logged for the steps
// this one redoes. It first repairs the earlier sessions' files (see
// RepairDir); Repairs says what it cut.
func (r *Run) Begin(firstStep int) error {
	if r.w != nil {
		return errors.New("tensorboard: Begin called twice")
	}
	reps, err := RepairDir(r.dir)
	r.repairs = reps
	if err != nil {
		return err
	}
	now := time.Now()
	w, err := Create(r.dir, now)
	if err != nil {
		return err
	}
	r.w = w
	return w.Write(StartEvent(now, int64(firstStep)))
}

// Scalars writes one event with the values at step.
func (r *Run) Scalars(step int, wall time.Time, values []Scalar) error {
	if r.w == nil {
		return errors.New("tensorboard: Scalars before Begin")
	}
	return r.w.Write(ScalarEvent(wall, int64(step), values))
}

// Text writes a Markdown text summary under tag at step.
func (r *Run) Text(step int, wall time.Time, tag, markdown string) error {
	if r.w == nil {
		return errors.New("tensorboard: Text before Begin")
	}
	return r.w.Write(TextEvent(wall, int64(step), tag, markdown))
}

// Flush makes the events written so far durable.
func (r *Run) Flush() error {
	if r.w == nil {
		return nil
	}
	return r.w.Flush()
}

// Close flushes and closes the session's file.
func (r *Run) Close() error {
	if r.w == nil {
		return nil
	}
	err := r.w.Close()
	r.w = nil
	return err
}

// Repair is an events file cut back to its last whole record.
type Repair struct {
	Path    string
	Size    int64 // bytes before the cut
	Kept    int64 // bytes kept: the whole records before the damage
	Records int   // whole records kept
	Reason  string
}

func (r Repair) String() string {
	return fmt.Sprintf("%s: %s at byte %d; cut to its %d whole records (%d of %d bytes kept)",
		r.Path, r.Reason, r.Kept, r.Records, r.Kept, r.Size)
}

// RepairDir cuts every events file in dir that ends in a partial or damaged
// record (a process killed mid-write, a full disk) back to its last whole
// record, and reports each: TensorBoard stops reading a file at such a
// record, so without the cut the rest of that session's events, and a
// reader's view of the file, stay broken. A file without damage is not
// touched; a missing dir has nothing to repair.
func RepairDir(dir string) ([]Repair, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	var reps []Repair
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return reps, fmt.Errorf("tensorboard: repair: %w", err)
		}
		kept, n, why := wholeRecords(b)
		if why == "" {
			continue
		}
		if err := cutFile(path, kept); err != nil {
			return reps, fmt.Errorf("tensorboard: repair %s: %w", path, err)
		}
		reps = append(reps, Repair{Path: path, Size: int64(len(b)), Kept: kept, Records: n, Reason: why})
	}
	return reps, nil
}

// wholeRecords returns the length of b's prefix of whole, checksummed
// TFRecords, their count, and why the rest is not one ("" when b is all
// whole records).
func wholeRecords(b []byte) (int64, int, string) {
	off, n := 0, 0
	for off < len(b) {
		rest := b[off:]
		if len(rest) < 12 {
			return int64(off), n, "a partial record header"
		}
		if binary.LittleEndian.Uint32(rest[8:12]) != MaskedCRC(rest[:8]) {
			return int64(off), n, "a record length that fails its checksum"
		}
		size := binary.LittleEndian.Uint64(rest[:8])
		if avail := uint64(len(rest) - 12); size > avail || avail-size < 4 {
			return int64(off), n, "a partial record"
		}
		end := 12 + int(size)
		if binary.LittleEndian.Uint32(rest[end:end+4]) != MaskedCRC(rest[12:end]) {
			return int64(off), n, "a record that fails its checksum"
		}
		off += end + 4
		n++
	}
	return int64(off), n, ""
}

func cutFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
