// Command helper is the process proctest's own tests run; its first argument
// says how to behave.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	log := json.NewEncoder(os.Stdout)
	switch os.Args[1] {
	case "listen": // log the environment, listen, and exit 0 on SIGTERM
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		_ = log.Encode(map[string]any{"msg": "starting", "env": os.Environ()})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = log.Encode(map[string]any{"msg": "http listening", "addr": l.Addr().String()})
		<-term
		os.Exit(0)
	case "exit": // one line on stderr, exit 3
		fmt.Fprintln(os.Stderr, "bye")
		os.Exit(3)
	case "notjson": // a stdout line that is not a log line, then wait
		fmt.Println("not json")
		time.Sleep(time.Hour)
	case "lines": // n lines on stdout, then wait
		n, _ := strconv.Atoi(os.Args[2])
		for i := range n {
			_ = log.Encode(map[string]any{"msg": "line " + strconv.Itoa(i)})
		}
		time.Sleep(time.Hour)
	case "spawn": // start a child that sleeps, log its pid, then wait
		child := exec.Command(os.Args[0], "sleep")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = log.Encode(map[string]any{"msg": "child", "pid": child.Process.Pid})
		time.Sleep(time.Hour)
	case "sleep":
		time.Sleep(time.Hour)
	}
}
