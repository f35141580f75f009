// Command demoserver plays the dependencies of `make demo`: after a delay it
// creates a file, then opens a TCP port, then serves HTTP, so that the agent
// has something real to wait for. Loopback only.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	file := flag.String("file", "", "file to create")
	tcpAddr := flag.String("tcp", "127.0.0.1:0", "TCP address to open")
	httpAddr := flag.String("http", "127.0.0.1:0", "HTTP address to serve /healthz on")
	step := flag.Duration("step", 2*time.Second, "delay before each dependency appears")
	life := flag.Duration("life", 60*time.Second, "exit after this long")
	flag.Parse()
	time.AfterFunc(*life, func() { os.Exit(0) })

	time.Sleep(*step)
	if err := os.WriteFile(*file, []byte("ready\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("demoserver: created %s\n", *file)

	time.Sleep(*step)
	l, err := net.Listen("tcp", *tcpAddr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	fmt.Printf("demoserver: listening on tcp %s\n", *tcpAddr)

	time.Sleep(*step)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	fmt.Printf("demoserver: serving http://%s/healthz\n", *httpAddr)
	log.Fatal(http.ListenAndServe(*httpAddr, mux))
}
