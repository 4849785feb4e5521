// A program that replaces `operator new(size_t)` alone, asking `malloc`
// for 64 bytes more than each request, and keeps the C++ library's
// `operator delete`, which frees with `free`: correct on glibc, where the
// library's delete is `free`. Under the preload library the sized delete
// that `delete` of a complete type calls names the size the program's
// `operator new` was given, not the one `malloc` was: it must not be taken
// for a wrong size. Prints its count of news, then "survived".
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

static long news;

void *operator new(std::size_t n) {
    news++;
    void *p = std::malloc(n + 64);
    if (!p)
        throw std::bad_alloc();
    return p;
}

template <std::size_t N> struct Bytes {
    char b[N];
    ~Bytes() {}
};

template <std::size_t N> static void churn() {
    for (int i = 0; i < 1000; i++) {
        Bytes<N> *b = new Bytes<N>;
        delete b; // operator delete(void*, size_t): N, the block holds N + 64
        Bytes<N> *a = new Bytes<N>[i % 5 + 1];
        delete[] a; // operator delete[](void*, size_t)
    }
}

int main() {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    churn<8>();
    churn<40>();
    churn<100>();
    churn<1000>();
    churn<5000>();
    churn<65500>();
    std::vector<std::string> v;
    for (int i = 0; i < 10000; i++)
        v.emplace_back(i % 200, 'y');
    std::printf("%ld news\n", news);
    std::puts("survived");
    return 0;
}
