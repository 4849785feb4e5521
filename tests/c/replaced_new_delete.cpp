// A program that replaces `operator new(size_t)` and `operator
// delete(void*)` with a pool of its own, and keeps the C++ library's other
// forms, which lead to these two: the sized delete that `delete` of a
// complete type calls, the array forms. Under the preload library, whose
// deletes are found before the C++ library's, every delete must still
// reach the program's own (a pool block handed to `free` would stop the
// process as an invalid pointer), and blocks the program's `operator new`
// pads (asking `malloc` for more than the size the sized delete names)
// must not be taken for a wrong size. Prints the deletes its operator saw,
// then "survived".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

static char pool[64 << 20];
static std::size_t used;
static long deletes;

// Every other block from the pool, the rest from malloc with 64 bytes of
// padding: both kinds reach the program's `operator delete`.
void *operator new(std::size_t n) {
    static unsigned turn;
    if (turn++ % 2 == 0 && used + n + 16 <= sizeof pool) {
        void *p = pool + used;
        used += (n + 16) & ~std::size_t(15);
        return p;
    }
    void *p = std::malloc(n + 64);
    if (!p)
        throw std::bad_alloc();
    return p;
}

void operator delete(void *p) noexcept {
    deletes++;
    char *c = static_cast<char *>(p);
    if (c >= pool && c < pool + sizeof pool)
        return;
    std::free(p);
}

struct Node {
    long v[5];
    ~Node() {}
};

int main() {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    for (int i = 0; i < 10000; i++) {
        Node *n = new Node;
        delete n; // operator delete(void*, size_t)
        Node *a = new Node[i % 7 + 1];
        delete[] a; // operator delete[](void*, size_t)
        char *b = new char[i % 300 + 1];
        delete[] b; // operator delete[](void*)
        std::string s(i % 100, 'x');
        std::vector<int> v(i % 50, i);
    }
    std::printf("%ld deletes\n", deletes);
    std::puts(deletes >= 30000 ? "survived" : "too few deletes reached the program's operator");
    return 0;
}
