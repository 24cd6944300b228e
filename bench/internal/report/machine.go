package report

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the figures were taken.
type Machine struct {
	Host, CPU, Cores  string      // the host's name, CPU model and core count
	DBName, DBVersion string      // "PostgreSQL" or "SQLite", and its version
	Settings          [][2]string // the database's settings that bear on the figures, name and value
	Relay             string      // the relay settings every row ran with
}

// Host is the host's part of Machine: its name, CPU model and core count.
func Host() Machine {
	host, err := os.Hostname()
	if err != nil {
		host = "(unknown)"
	}
	return Machine{Host: host, CPU: cpuModel(), Cores: fmt.Sprint(runtime.NumCPU())}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
