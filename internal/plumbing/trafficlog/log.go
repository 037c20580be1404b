package trafficlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Log writes records, one JSON line each, from a queue of its own: a slow
// disk never holds a request. When the queue is full, records are dropped
// and counted (Dropped), never waited for.
type Log struct {
	w     io.Writer
	queue chan *bytes.Buffer
	done  chan struct{}
	mu    sync.RWMutex
	shut  bool
	// Written and Dropped count records.
	Written, Dropped atomic.Int64
}

// QueueLength is how many records may wait for the disk.
const QueueLength = 8192

// File is a traffic log in a file that is rotated when it reaches
// maxSizeMB megabytes, keeping maxBackups old files (lumberjack).
func File(path string, maxSizeMB, maxBackups int) io.WriteCloser {
	return &lumberjack.Logger{Filename: path, MaxSize: maxSizeMB, MaxBackups: maxBackups}
}

// New starts a log writing to w; Close stops it.
func New(w io.Writer) *Log {
	l := &Log{w: w, queue: make(chan *bytes.Buffer, QueueLength), done: make(chan struct{})}
	go l.run()
	return l
}

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Write queues r as one line.
func (l *Log) Write(r *Record) {
	b := buffers.Get().(*bytes.Buffer)
	b.Reset()
	r.Kind = Kind
	// A Record has no value that fails to encode.
	_ = json.NewEncoder(b).Encode(r)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.shut {
		buffers.Put(b)
		return
	}
	select {
	case l.queue <- b:
	default:
		buffers.Put(b)
		l.Dropped.Add(1)
	}
}

// run writes queued lines, flushing whenever the queue is empty, so that
// lines reach the file promptly when traffic is light and in large
// writes when it is heavy.
func (l *Log) run() {
	defer close(l.done)
	bw := bufio.NewWriterSize(l.w, 64*1024)
	for b := range l.queue {
		_, _ = bw.Write(b.Bytes())
		buffers.Put(b)
		l.Written.Add(1)
		if len(l.queue) == 0 {
			_ = bw.Flush()
		}
	}
	_ = bw.Flush()
}

// Close writes what is queued and closes the file (not stderr).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return nil
	}
	l.shut = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	if c, ok := l.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
