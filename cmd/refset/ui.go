package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/refset"
)

// tokenEnv names the environment variable --token defaults to, which keeps the token
// out of the process list.
const tokenEnv = "REFSET_UI_TOKEN"

// minSampleEvery is the shortest --sample-every the console takes.
const minSampleEvery = time.Second

// uiCheck refuses, before the database is opened, a --cap that is not positive, a
// --sample-every under a second, and an --addr off loopback without a token.
func uiCheck(fs *flag.FlagSet) error {
	if err := capCheck(fs); err != nil {
		return err
	}
	if every, _ := fs.Lookup("sample-every").Value.(flag.Getter).Get().(time.Duration); every < minSampleEvery {
		return fmt.Errorf("%w: --sample-every %v is below %v", refset.ErrInvalidConfig, every, minSampleEvery)
	}
	token := fs.Lookup("token").Value.String()
	if token == "" {
		token = os.Getenv(tokenEnv)
	}
	return console.CheckAddr(fs.Lookup("addr").Value.String(), token)
}

func uiCommand(fs *flag.FlagSet) func(context.Context, call) error {
	addr := fs.String("addr", "127.0.0.1:8080", "the address to serve on: a loopback address, or any other with --token")
	token := fs.String("token", "", "the token every request must carry (Authorization: Bearer, or once as /login?token=...); required off loopback (default $"+tokenEnv+")")
	every := fs.Duration("sample-every", console.DefaultSampleEvery, "how often the clean-up page's sampler counts every set (at least 1s)")
	limit := capFlag(fs)
	return func(ctx context.Context, c call) error {
		if *token == "" {
			*token = os.Getenv(tokenEnv)
		}
		// The console's failures (a page's server error, a sample that failed) go to
		// stderr: the operator who runs ui hears of them there, not only the
		// browser that met one.
		logger := slog.New(slog.NewTextHandler(c.stderr, nil))
		h, err := console.New(ctx, c.db, console.Config{Token: *token, SampleEvery: *every, CountCap: *limit, Logger: logger})
		if err != nil {
			return err
		}
		defer h.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		stopped := context.AfterFunc(ctx, func() {
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		})
		defer stopped()
		if _, err := fmt.Fprintf(c.out, "refset ui: serving http://%s/ (interrupt to stop)\n", ln.Addr()); err != nil {
			ln.Close()
			return err // whoever started it cannot learn where it serves
		}
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
