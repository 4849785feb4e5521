// C++'s sized and aligned deletes under the preload library:
//
//     sized_delete CASE
//
// CASE `right` news and deletes the way a program does: objects of many
// sizes (`delete` of a complete type calls the sized delete), arrays with
// and without a cookie, over-aligned objects and arrays, containers, and
// `operator new` / `operator delete` called directly with every size up to
// 66,000 bytes and every alignment up to a page; then prints "survived".
// The other cases print the block's address (`%p`, the first line of
// stdout), then delete it with a wrong size or alignment, and print
// "survived" if that returns:
//   smaller          operator new(100), operator delete(p, 20)
//   bigger           operator new(100), operator delete(p, 300)
//   array_bigger     operator new[](100), operator delete[](p, 300)
//   large_as_small   operator new(1 MiB), operator delete(p, 100)
//   aligned_wrong    operator new(100, 64), operator delete(p, 100, 4096)
//   aligned_bigger   operator new(100, 64), operator delete(p, 1000, 64)
// tests/processes/misuse.rs expects death by SIGABRT after one
// "slubmalloc: " line naming "dealloc with the wrong layout" and that
// address.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

template <std::size_t N> struct Bytes {
    char b[N];
};

template <std::size_t N> struct Counted {
    char b[N];
    static int live;
    Counted() { live++; }
    ~Counted() { live--; }
};
template <std::size_t N> int Counted<N>::live = 0;

template <std::size_t N, std::size_t A> struct alignas(A) Aligned {
    char b[N];
};

template <typename T> static void one(int n) {
    for (int i = 0; i < n; i++) {
        T *t = new T;
        std::memset(static_cast<void *>(t), 1, sizeof(T));
        delete t;
        // Arrays: a cookie when the type has a destructor.
        T *a = new T[i + 1];
        delete[] a;
    }
}

template <std::size_t... Ns> static void objects() {
    (one<Bytes<Ns>>(3), ...);
    (one<Counted<Ns>>(3), ...);
}

template <std::size_t A, std::size_t... Ns> static void aligned_objects() {
    (one<Aligned<Ns, A>>(3), ...);
}

static void right() {
    objects<1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 100, 112, 127, 128, 129,
            160, 200, 255, 256, 257, 320, 500, 512, 513, 1000, 1024, 1025, 2048, 4095, 4096,
            4097, 10000, 32768, 40000, 65536, 65537, 100000, 1 << 20>();
    aligned_objects<32, 1, 32, 33, 100, 1000, 5000>();
    aligned_objects<64, 1, 64, 65, 130, 1000, 70000>();
    aligned_objects<256, 1, 256, 300, 5000>();
    aligned_objects<4096, 1, 4096, 5000, 70000>();
    for (std::size_t n = 0; n <= 66000; n++) {
        void *p = ::operator new(n);
        ::operator delete(p, n);
        p = ::operator new[](n);
        ::operator delete[](p, n);
    }
    for (std::size_t a = 1; a <= 4096; a *= 2) {
        for (std::size_t n = 1; n <= 70000; n += n / 3 + 1) {
            void *p = ::operator new(n, std::align_val_t(a));
            if (reinterpret_cast<std::uintptr_t>(p) % a) {
                std::printf("operator new(%zu, %zu) misaligned\n", n, a);
                std::exit(3);
            }
            ::operator delete(p, n, std::align_val_t(a));
            p = ::operator new[](n, std::align_val_t(a));
            ::operator delete[](p, n, std::align_val_t(a));
        }
    }
    std::map<int, std::string> m;
    std::vector<std::unique_ptr<std::vector<int>>> v;
    for (int i = 0; i < 20000; i++) {
        m[i % 977] = std::string(i % 300, 'x');
        v.push_back(std::make_unique<std::vector<int>>(i % 100, i));
        if (v.size() > 500)
            v.erase(v.begin(), v.begin() + 250);
    }
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "right";
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    if (!std::strcmp(c, "right")) {
        right();
        std::puts("survived");
        return 0;
    }
    void *p;
    if (!std::strcmp(c, "array_bigger"))
        p = ::operator new[](100);
    else if (!std::strcmp(c, "large_as_small"))
        p = ::operator new(1 << 20);
    else if (!std::strncmp(c, "aligned", 7))
        p = ::operator new(100, std::align_val_t(64));
    else
        p = ::operator new(100);
    std::printf("%p\n", p);
    if (!std::strcmp(c, "smaller"))
        ::operator delete(p, 20);
    else if (!std::strcmp(c, "bigger"))
        ::operator delete(p, 300);
    else if (!std::strcmp(c, "array_bigger"))
        ::operator delete[](p, 300);
    else if (!std::strcmp(c, "large_as_small"))
        ::operator delete(p, 100);
    else if (!std::strcmp(c, "aligned_wrong"))
        ::operator delete(p, 100, std::align_val_t(4096));
    else if (!std::strcmp(c, "aligned_bigger"))
        ::operator delete(p, 1000, std::align_val_t(64));
    else {
        std::fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    std::puts("survived");
    return 0;
}
