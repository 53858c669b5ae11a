module kata-mem/tests/oracle/golang

go 1.26.0
