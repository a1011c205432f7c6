package raftnet

import (
	"log/slog"
	"net"
	"strconv"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Factory creates the transport of a NodeHost; it implements
// config.TransportFactory, to be set as
// NodeHostConfig.Expert.TransportFactory.
type Factory struct {
	// Log receives the transport's warnings; nil means slog.Default().
	Log *slog.Logger
	// Heard, when set, is told the sender's replica id of every message
	// batch received (once per sender in a batch): whom this node hears
	// from, for the engine's liveness check before a member is removed.
	Heard func(replicaID uint64)
}

var _ config.TransportFactory = (*Factory)(nil)

// Create returns a transport for cfg's addresses and TLS settings that hands
// what it receives to onBatch and onChunk. NodeHost starts and closes it.
func (f *Factory) Create(cfg config.NodeHostConfig, onBatch raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	if heard := f.Heard; heard != nil {
		next := onBatch
		onBatch = func(b pb.MessageBatch) {
			var last uint64
			for i := range b.Requests {
				if from := b.Requests[i].From; from != last {
					heard(from)
					last = from
				}
			}
			next(b)
		}
	}
	return &Transport{cfg: cfg, onBatch: onBatch, onChunk: onChunk, log: log}
}

// Validate reports whether addr is a TCP address this transport can dial:
// host:port with a port in 1..65535.
func (f *Factory) Validate(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 1 && p <= 65535
}
