package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ProcRSS returns a Config.RSS that reads VmRSS of process pid from
// /proc/<pid>/status (Linux).
func ProcRSS(pid int) func() (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	return func() (int64, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		return parseVmRSS(data)
	}
}

// parseVmRSS finds "VmRSS:   1234 kB" in the text of a /proc status file.
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			break
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			break
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS in process status")
}
