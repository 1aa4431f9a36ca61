module github.com/sluice-io/sluice/tools

go 1.26.8
