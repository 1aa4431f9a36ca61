package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// compareMain runs the repository's Go micro-benchmarks at a base revision
// (a git worktree in a temporary directory) and at the working tree, and
// writes benchstat's comparison to <out>/<date>-benchstat.txt.
//
// Each package's test binary is built once per side, with -trimpath so the
// base's build reuses the build cache despite living in another directory;
// then each count runs base and new back to back for every package, in
// alternating order, so drift on a shared 2-core machine (a neighbour's
// load, disk writeback) lands on both sides instead of on whichever ran
// second.
func compareMain(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	base := fs.String("base", "HEAD~1", "git revision to compare the working tree with")
	repo := fs.String("repo", ".", "the repository (any directory inside it)")
	out := fs.String("out", "bench/results", "directory for <date>-benchstat.txt")
	count := fs.Int("count", 6, "runs of every benchmark on each side (benchstat wants 6 or more)")
	benchtime := fs.String("benchtime", "100ms", "go test -benchtime of every run")
	bench := fs.String("bench", ".", "go test -bench regexp")
	benchstat := fs.String("benchstat", "bin/benchstat", "benchstat binary (make bench-tools)")
	goCmd := fs.String("go", "go", "go command")
	_ = fs.Parse(args) // ExitOnError
	pkgs := fs.Args()
	if len(pkgs) == 0 {
		return fmt.Errorf("no packages: give package directories relative to the repository root")
	}
	if *count < 1 {
		return fmt.Errorf("--count must be at least 1")
	}
	if _, err := os.Stat(*benchstat); err != nil {
		return fmt.Errorf("benchstat: %w (run make bench-tools)", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	root, err := output(ctx, *repo, "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	baseRev, err := output(ctx, root, "git", "rev-parse", "--verify", *base+"^{commit}")
	if err != nil {
		return err
	}
	head, _ := output(ctx, root, "git", "rev-parse", "--short", "HEAD")
	dirty, _ := output(ctx, root, "git", "status", "--porcelain", "--untracked-files=no")

	tmp, err := os.MkdirTemp("", "sluice-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "base")
	if _, err := output(ctx, root, "git", "worktree", "add", "--detach", tree, baseRev); err != nil {
		return err
	}
	// Removed on every exit path; a background context, since ctx may be
	// the reason for leaving.
	defer func() {
		if _, err := output(context.Background(), root, "git", "worktree", "remove", "--force", tree); err != nil {
			fmt.Fprintf(os.Stderr, "sluice-bench compare: %v\n", err)
		}
	}()

	type side struct {
		name, tree, bins string
		out              bytes.Buffer
		built            map[string]string // package dir -> test binary
	}
	sides := []*side{
		{name: "base", tree: tree, bins: filepath.Join(tmp, "bin-base"), built: map[string]string{}},
		{name: "new", tree: root, bins: filepath.Join(tmp, "bin-new"), built: map[string]string{}},
	}
	var notes []string
	for _, s := range sides {
		for _, pkg := range pkgs {
			if _, err := os.Stat(filepath.Join(s.tree, pkg)); err != nil {
				if s.name == "new" {
					return err
				}
				notes = append(notes, fmt.Sprintf("%s: %s does not exist", s.name, pkg))
				continue
			}
			bin := filepath.Join(s.bins, strings.ReplaceAll(filepath.Clean(pkg), "/", "_")+".test")
			if _, err := output(ctx, s.tree, *goCmd, "test", "-c", "-trimpath", "-o", bin, "./"+filepath.Clean(pkg)); err != nil {
				if s.name == "new" || ctx.Err() != nil {
					return err
				}
				// The base may predate a package or fail to build it;
				// benchstat then shows the new side alone.
				notes = append(notes, fmt.Sprintf("base: %s does not build: %v", pkg, firstLine(err.Error())))
				continue
			}
			s.built[pkg] = bin
		}
	}
	built := time.Since(start)
	fmt.Fprintf(os.Stderr, "compare: built in %.0f s; %d runs of %d packages on each side\n", built.Seconds(), *count, len(pkgs))

	var failed []string
	for i := 0; i < *count; i++ {
		order := sides
		if i%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, pkg := range pkgs {
			for _, s := range order {
				bin, ok := s.built[pkg]
				if !ok {
					continue
				}
				cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", *bench,
					"-test.benchtime", *benchtime, "-test.count", "1", "-test.timeout", "5m")
				// Tests read their testdata relative to the package.
				cmd.Dir = filepath.Join(s.tree, pkg)
				var stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &s.out, &stderr
				if err := cmd.Run(); err != nil {
					if ctx.Err() != nil {
						return fmt.Errorf("interrupted; nothing written")
					}
					failed = append(failed, fmt.Sprintf("%s %s run %d: %v %s", s.name, pkg, i+1, err, firstLine(strings.TrimSpace(stderr.String()))))
				}
			}
		}
		fmt.Fprintf(os.Stderr, "compare: run %d/%d done at %.0f s\n", i+1, *count, time.Since(start).Seconds())
	}

	files := make([]string, len(sides))
	for i, s := range sides {
		files[i] = filepath.Join(tmp, s.name+".txt")
		if err := os.WriteFile(files[i], s.out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	table, err := output(ctx, tmp, *benchstat, "base="+files[0], "new="+files[1])
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice-bench compare, %s: %s (%s) against the working tree at %s", now.Format("2006-01-02 15:04:05 UTC"), *base, shortRev(baseRev), head)
	if dirty != "" {
		b.WriteString(" with uncommitted changes")
	}
	fmt.Fprintf(&b, "\n# go test -bench %q -benchtime %s, %d runs per side alternated; %.1f min (%.0f s building)\n# packages: %s\n",
		*bench, *benchtime, *count, time.Since(start).Minutes(), built.Seconds(), strings.Join(pkgs, " "))
	for _, n := range append(notes, failed...) {
		b.WriteString("# " + n + "\n")
	}
	b.WriteString("\n" + table + "\n")
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	name := filepath.Join(*out, now.Format("2006-01-02-150405")+"Z-benchstat.txt")
	if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("benchstat: %s (%.1f min)\n", name, time.Since(start).Minutes())
	if len(failed) > 0 {
		return fmt.Errorf("%d benchmark runs failed: %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

// output runs a command in dir and returns its trimmed standard output; an
// error carries its standard error.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
