package raftnet

import (
	"log/slog"
	"net"
	"strconv"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
)

// Factory creates the transport of a NodeHost; it implements
// config.TransportFactory, to be set as
// NodeHostConfig.Expert.TransportFactory.
type Factory struct {
	// Log receives the transport's warnings; nil means slog.Default().
	Log *slog.Logger
}

var _ config.TransportFactory = (*Factory)(nil)

// Create returns a transport for cfg's addresses and TLS settings that hands
// what it receives to onBatch and onChunk. NodeHost starts and closes it.
func (f *Factory) Create(cfg config.NodeHostConfig, onBatch raftio.MessageHandler, onChunk raftio.ChunkHandler) raftio.ITransport {
	log := f.Log
	if log == nil {
		log = slog.Default()
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
