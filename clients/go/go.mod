module kata-mem/clients/go

go 1.19
