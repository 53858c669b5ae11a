from kata_mem.main import run

run()
