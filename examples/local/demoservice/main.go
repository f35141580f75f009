// Command demoservice is the service of `make demo`, standing in for an
// OpenStack API: it reads an INI config, serves HTTP, writes its log file,
// takes a changed config on SIGHUP and stops on SIGTERM. With -dependency it
// plays the database instead: a TCP port that opens after a delay. With
// -check it validates a config file, as oslo-config-validator would.
// Loopback only.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	configPath := flag.String("config", "", "the service's INI config")
	logPath := flag.String("log", "", "the service's log file")
	check := flag.String("check", "", "validate this config file and exit")
	dep := flag.String("dependency", "", "play the dependency: open this TCP address after -after")
	after := flag.Duration("after", 3*time.Second, "delay before the dependency opens")
	flag.Parse()
	switch {
	case *check != "":
		if _, err := load(*check); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *check, err)
			os.Exit(1)
		}
	case *dep != "":
		dependency(*dep, *after)
	default:
		if err := serve(*configPath, *logPath); err != nil {
			log.Fatal(err)
		}
	}
}

type conf struct {
	bind     string
	port     int
	greeting string
}

// load reads [DEFAULT] bind, port and greeting; every other key is refused,
// as oslo.config refuses none but a validator would flag it.
func load(path string) (conf, error) {
	f, err := os.Open(path)
	if err != nil {
		return conf{}, err
	}
	defer f.Close()
	c := conf{bind: "127.0.0.1"}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || l == "[DEFAULT]" {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return conf{}, fmt.Errorf("line %d: want key = value", n)
		case k == "bind":
			c.bind = v
		case k == "port":
			if c.port, err = strconv.Atoi(v); err != nil || c.port < 1 || c.port > 65535 {
				return conf{}, fmt.Errorf("line %d: port: %q is not a port", n, v)
			}
		case k == "greeting":
			c.greeting = v
		default:
			return conf{}, fmt.Errorf("line %d: unknown option %q", n, k)
		}
	}
	if c.port == 0 || c.greeting == "" {
		return conf{}, errors.New("port and greeting are required")
	}
	return c, sc.Err()
}

func serve(configPath, logPath string) error {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	logf := func(level, format string, args ...any) {
		fmt.Fprintf(lf, "%s %d %s demoservice [-] %s\n", time.Now().Format("2006-01-02 15:04:05.000"), os.Getpid(), level, fmt.Sprintf(format, args...))
	}
	c, err := load(configPath)
	if err != nil {
		return err
	}
	var greeting atomic.Pointer[string]
	greeting.Store(&c.greeting)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		logf("INFO", "GET %s 200", r.URL.Path)
		fmt.Fprintln(w, *greeting.Load())
	})
	srv := &http.Server{Addr: net.JoinHostPort(c.bind, strconv.Itoa(c.port)), Handler: mux}
	l, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return err
	}
	logf("INFO", "serving http://%s/ (greeting %q)", srv.Addr, c.greeting)
	go srv.Serve(l)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for s := range sigs {
		if s != syscall.SIGHUP {
			logf("INFO", "stopping on %v", s)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		}
		n, err := load(configPath)
		if err != nil {
			logf("ERROR", "reload: %v: keeping the running config", err)
			continue
		}
		greeting.Store(&n.greeting)
		logf("INFO", "reloaded %s on SIGHUP: greeting %q", configPath, n.greeting)
	}
	return nil
}

func dependency(addr string, after time.Duration) {
	time.Sleep(after)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("demo: the database is up on %s\n", addr)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
